"""Composite GSM8K reward used to train and score completions.

A completion is expected to look like::

    <start_working_out>
    ... arithmetic, one step per line ...
    </start_working_out>
    <SOLUTION>42</SOLUTION>

The total reward is the sum of four components, correct, format, present and steps (their values:
:func:`reward_components`), so every total lies in [-1.0, 7.5]. Every function here is total: it
accepts any string and never raises. This module is pure Python on purpose (no torch, no TRL) so
that evaluation code and tests can import it cheaply.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext

WORKING_OPEN = "<start_working_out>"
WORKING_CLOSE = "</start_working_out>"
SOLUTION_OPEN = "<SOLUTION>"
SOLUTION_CLOSE = "</SOLUTION>"
TAGS = (WORKING_OPEN, WORKING_CLOSE, SOLUTION_OPEN, SOLUTION_CLOSE)

# r_correct values
CORRECT_EXACT = 4.0
CORRECT_CLOSE = 1.5
CORRECT_WRONG = 0.0
CORRECT_MISSING = -0.5
CLOSE_RELATIVE_TOLERANCE = Decimal("0.1")

# r_format values; partial credit is kept in tenths so sums are exact floats.
FORMAT_DUPLICATE = -0.5
FORMAT_FULL = 1.5
FORMAT_PARTIAL_TENTHS = {WORKING_OPEN: 2, WORKING_CLOSE: 3, SOLUTION_OPEN: 2, SOLUTION_CLOSE: 3}

# r_present values
PRESENT_CLOSED = 1.0
PRESENT_OPEN_ONLY = 0.3

# r_steps values: blank reasoning, then (most step lines in the bin, reward); 5 or more step lines earn STEPS_MANY.
STEPS_EMPTY = 0.0
STEP_BINS = ((0, 0.1), (2, 0.4), (4, 0.7))
STEPS_MANY = 1.0

#: The lowest and highest value of each component (the table above), keyed as in reward_components.
COMPONENT_BOUNDS = {
    "correct": (CORRECT_MISSING, CORRECT_EXACT),
    "format": (FORMAT_DUPLICATE, FORMAT_FULL),
    "present": (0.0, PRESENT_CLOSED),
    "steps": (STEPS_EMPTY, STEPS_MANY),
}
MAX_TOTAL = CORRECT_EXACT + FORMAT_FULL + PRESENT_CLOSED + STEPS_MANY  # 7.5
MIN_TOTAL = CORRECT_MISSING + FORMAT_DUPLICATE + 0.0 + STEPS_EMPTY  # -1.0: no number, a repeated tag, nothing else

# Characters typeset text uses for a minus sign: U+2212 MINUS SIGN, U+2012 FIGURE DASH, U+2013 EN DASH, U+FE63 SMALL
# HYPHEN-MINUS, U+FF0D FULLWIDTH HYPHEN-MINUS.  They are read exactly like "-" (so "\u22125" is -5, and "3\u20134"
# is a range or subtraction like "3-4").  Each maps to one character, so positions in the text do not move.  Hyphens
# (U+2010/2011) and the em dash are punctuation, not minus signs, and are left alone.
MINUS_SIGNS = "\u2212\u2012\u2013\ufe63\uff0d"
_MINUS_TO_ASCII = str.maketrans({c: "-" for c in MINUS_SIGNS})

# Exponent notation ("2.5e3", "1e-4") is read as the number it denotes, exactly. Exponents beyond this size make the
# number unparseable (None) rather than letting a few characters expand into millions of digits.
MAX_EXPONENT = 1000

# A number as it appears in model text (after minus signs are mapped to "-").
# Pieces, in order:
# * an optional sign and currency prefix: "-", "-$", "$-" or "$".  A minus
#   glued to a preceding letter, digit or closing bracket is a subtraction or
#   hyphen ("3-4", "x-2"), not a sign, so "3-4" reads as 3 and 4;
# * the mantissa: properly grouped thousands ("1,234,567") or a plain digit
#   run, then an optional fractional part whose dot must be followed by a
#   digit or an exponent (so a sentence-ending period in "... is 18." is not
#   part of it, while "1.e3" is one number); or a leading-dot decimal (".5"),
#   whose dot must not follow a digit or another dot (so "1.2.3" never yields
#   ".3").  The grouped form must not be
#   followed by another digit, so "1,2345" is read as 1 and 2345 rather than
#   as one number, and a list "3,4,5" is read as three numbers;
# * an optional exponent: "e" or "E", an optional sign, digits.
_NUMBER_RE = re.compile(
    r"(?:(?<![\w)\]])-\$?|\$-?)?"
    r"(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+|\.(?=[eE][+-]?\d))?|(?<![\d.])\.\d+)"
    r"(?:[eE][+-]?\d+)?",
    re.ASCII,  # ASCII digits only, so normalised answers are plain "0-9" strings
)
# What normalize_number accepts once "$" is removed, minus signs mapped to "-", the ends stripped and one trailing
# period dropped: sign, integer part (plain or properly grouped thousands), fraction, exponent.
_PLAIN_NUMBER_RE = re.compile(
    r"(-?)(\d{1,3}(?:,\d{3})+|\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", re.ASCII
)

# A step line either holds a calculation or starts with an enumerator ("Step 3", "step 3:", "3.", "3)"; the dot must
# not start a decimal, so a line opening with "3.5 kg ..." is not an enumerator).  A calculation is what the regex
# \d[^=\n]*=[ \t$-]*\d  finds: a digit, later on the same line an "=" with no other "=" in between, then optionally
# spaces / "$" / "-", then a digit ("16 - 3 - 4 = 9", "9 * 2 = $18", "x = 2 + 3 = 5").  is_calculation evaluates
# that pattern by splitting on "=", which is linear in the line length (the regex itself is quadratic on long digit
# runs).
_DIGIT_RE = re.compile(r"[0-9]")
_RESULT_START_RE = re.compile(r"[ \t$-]*[0-9]")
_ENUMERATOR_RE = re.compile(r"^\s*(?:step\s*\d+|\d+[.)](?!\d))", re.IGNORECASE | re.ASCII)

# A SOLUTION block, closed or running to the end of the text.
_SOLUTION_BLOCK_RE = re.compile(
    re.escape(SOLUTION_OPEN) + r".*?(?:" + re.escape(SOLUTION_CLOSE) + r"|\Z)", re.DOTALL
)


def normalize_number(text: str) -> str | None:
    """Canonical string for one number, or None if ``text`` is not a number.

    "$1,234" -> "1234", "18.00" -> "18", "-0.50" -> "-0.5", "18." -> "18", "-0" -> "0", ".5" -> "0.5",
    "\u22125" -> "-5", "2.5e3" -> "2500", "1e-3" -> "0.001".  Commas must group thousands ("1,2" is None).  An
    exponent beyond +-MAX_EXPONENT, "inf" and "nan" are None.  Done on the digits directly (not via
    Decimal.normalize) so arbitrarily long numbers stay exact and never turn into exponent form.
    """
    if not isinstance(text, str):
        return None
    cleaned = text.translate(_MINUS_TO_ASCII).replace("$", "").strip()
    cleaned = cleaned.removesuffix(".")
    match = _PLAIN_NUMBER_RE.fullmatch(cleaned)
    if match is None:
        return None
    sign, integer, fraction, exponent = match.groups()
    integer, fraction = integer.replace(",", ""), fraction or ""
    if not integer and not fraction:
        return None  # "", ".", "-", "e5"
    shift = _exponent(exponent)
    if shift is None:
        return None
    # Move the decimal point: it sits after len(integer) + shift of the digits.
    digits, point = integer + fraction, len(integer) + shift
    if point < 0:
        digits, point = "0" * -point + digits, 0
    digits = digits.ljust(point, "0")
    whole, fraction = digits[:point].lstrip("0") or "0", digits[point:].rstrip("0")
    canonical = f"{whole}.{fraction}" if fraction else whole
    return canonical if canonical == "0" else sign + canonical


def _exponent(text: str | None) -> int | None:
    """The exponent's value (0 when absent), or None beyond +-MAX_EXPONENT.

    Its length is checked before int() so a huge digit run neither costs
    quadratic time nor hits Python's int-conversion digit limit.
    """
    if text is None:
        return 0
    body = text.lstrip("+-").lstrip("0")
    if len(body) > len(str(MAX_EXPONENT)):
        return None
    value = int(text[0] + body if text[0] in "+-" and body else body or "0")
    return value if abs(value) <= MAX_EXPONENT else None


def _last_number(text: str) -> str | None:
    """The last number in ``text``, normalised; None when there is none or it
    cannot be read exactly (an earlier number is never used instead)."""
    last = None
    for match in _NUMBER_RE.finditer(text.translate(_MINUS_TO_ASCII)):
        last = match.group(0)
    return None if last is None else normalize_number(last)


def _solution_block(text: str) -> str | None:
    """Content of the first SOLUTION block, or None when there is no opening tag.

    An opening tag that is never closed is read up to the end of the text:
    a completion cut off by the token limit still states its answer there.
    """
    start = text.find(SOLUTION_OPEN)
    if start < 0:
        return None
    start += len(SOLUTION_OPEN)
    end = text.find(SOLUTION_CLOSE, start)
    return text[start:] if end < 0 else text[start:end]


def extract_answer(completion: str) -> str | None:
    """The completion's final answer as a normalised number string, or None.

    With a ``<SOLUTION>`` tag the answer is the last number inside the first SOLUTION block; if that block holds no
    number the answer is None (the model committed to an answer slot and left it empty; numbers elsewhere are working,
    not an answer).  Without any ``<SOLUTION>`` tag the answer is the last number anywhere in the completion.
    """
    text = _as_text(completion)
    block = _solution_block(text)
    return _last_number(text if block is None else block)


def _to_decimal(number: str | None) -> Decimal | None:
    normalized = normalize_number(number) if isinstance(number, str) else None
    return None if normalized is None else Decimal(normalized)


def answers_match(pred: str | None, gold: str) -> bool:
    """Exact numeric equality (18 == 18.0 == 18.00); False if either is not a number."""
    pred_value, gold_value = _to_decimal(pred), _to_decimal(gold)
    return pred_value is not None and gold_value is not None and pred_value == gold_value  # Decimals: exact


def _within_tolerance(pred: Decimal, gold: Decimal) -> bool:
    """|pred - gold| <= 10% of |gold|, for non-zero gold, computed exactly."""
    if gold == 0:
        return False
    with localcontext() as context:
        # Enough digits that neither the subtraction nor the product can round,
        # however long the numbers (Decimal's default is 28 digits).
        context.prec = len(str(pred)) + len(str(gold)) + 8
        # ... and a number of a million digits must not overflow the default exponent range (Emax 999999).
        context.Emax, context.Emin = MAX_EMAX, MIN_EMIN
        return abs(pred - gold) <= CLOSE_RELATIVE_TOLERANCE * abs(gold)


def r_correct(completion: str, gold: str) -> float:
    """4.0 exact, 1.5 within 10% of a non-zero gold, 0.0 another number, -0.5 no number.

    A gold that is not a number (e.g. missing) can never be matched, so any extracted number scores 0.0 against it.
    """
    pred = extract_answer(completion)
    if pred is None:
        return CORRECT_MISSING
    pred_value, gold_value = Decimal(pred), _to_decimal(gold)
    if gold_value is None:
        return CORRECT_WRONG
    if pred_value == gold_value:
        return CORRECT_EXACT
    if _within_tolerance(pred_value, gold_value):
        return CORRECT_CLOSE
    return CORRECT_WRONG


def _tags_in_order(text: str) -> bool:
    positions = [text.find(tag) for tag in TAGS]
    return all(a < b for a, b in zip(positions, positions[1:]))


def _between(text: str, open_tag: str, close_tag: str) -> str:
    start = text.find(open_tag) + len(open_tag)
    return text[start : text.find(close_tag, start)]


def r_format(completion: str) -> float:
    """Tag discipline: -0.5 any tag repeated; 1.5 well-formed; else partial credit.

    Well-formed means each tag exactly once, in the order of ``TAGS``, with non-blank text in both the
    working-out and the solution block.  Otherwise each tag that is present earns its partial score (0.2 / 0.3 /
    0.2 / 0.3), so e.g. all four tags out of order, or with an empty block, earn 1.0. ``str.count`` is safe
    here: no tag is a substring of another (the closing tags differ from the opening ones at the "/").
    """
    text = _as_text(completion)
    counts = {tag: text.count(tag) for tag in TAGS}
    if any(count > 1 for count in counts.values()):
        return FORMAT_DUPLICATE
    if all(counts.values()) and _tags_in_order(text):
        working = _between(text, WORKING_OPEN, WORKING_CLOSE)
        solution = _between(text, SOLUTION_OPEN, SOLUTION_CLOSE)
        if working.strip() and solution.strip():
            return FORMAT_FULL
    tenths = sum(FORMAT_PARTIAL_TENTHS[tag] for tag, count in counts.items() if count)
    return tenths / 10


def r_present(completion: str) -> float:
    """1.0 for a ``<SOLUTION>`` closed later by ``</SOLUTION>``, 0.3 opened only, else 0."""
    text = _as_text(completion)
    start = text.find(SOLUTION_OPEN)
    if start < 0:
        return 0.0
    closed = text.find(SOLUTION_CLOSE, start + len(SOLUTION_OPEN)) >= 0
    return PRESENT_CLOSED if closed else PRESENT_OPEN_ONLY


def reasoning_text(completion: str) -> str:
    """The part of a completion that r_steps inspects.

    The working-out block when an opening tag is later closed; otherwise the whole completion minus its SOLUTION
    block(s) (an unclosed one runs to the end), with any stray tags replaced by line breaks so that a tag glued
    to the start of a line does not hide an enumerator.
    """
    text = _as_text(completion)
    start = text.find(WORKING_OPEN)
    if start >= 0:
        start += len(WORKING_OPEN)
        end = text.find(WORKING_CLOSE, start)
        if end >= 0:
            return text[start:end]
    remainder = _SOLUTION_BLOCK_RE.sub("\n", text)
    for tag in TAGS:
        remainder = remainder.replace(tag, "\n")
    return remainder


def is_calculation(line: str) -> bool:
    r"""True when the line matches  \d[^=\n]*=[ \t$-]*\d  (see the comment above _DIGIT_RE)."""
    pieces = line.split("=")
    return any(
        _DIGIT_RE.search(left) and _RESULT_START_RE.match(right)
        for left, right in zip(pieces, pieces[1:])
    )


def is_step_line(line: str) -> bool:
    """True for a line holding a calculation or opening with an enumerator."""
    return bool(_ENUMERATOR_RE.match(line)) or is_calculation(line)


def count_steps(reasoning: str) -> int:
    """Number of step lines (a line counts once even if it holds several calculations)."""
    return sum(1 for line in reasoning.splitlines() if is_step_line(line))


def r_steps(completion: str) -> float:
    """0.0 blank reasoning; then by step lines: 0 -> 0.1, 1-2 -> 0.4, 3-4 -> 0.7, 5+ -> 1.0."""
    reasoning = reasoning_text(completion)
    if not reasoning.strip():
        return STEPS_EMPTY
    steps = count_steps(reasoning)
    for max_steps, reward in STEP_BINS:
        if steps <= max_steps:
            return reward
    return STEPS_MANY


def reward_components(completion: str, gold: str) -> dict[str, float]:
    """All four components of one completion, keyed correct/format/present/steps.

    =========  ===================================  ==========================
    component  what it scores                       values
    =========  ===================================  ==========================
    correct    the extracted number vs. the gold    -0.5, 0, 1.5, 4.0
    format     the four tags, once each, in order   -0.5, 0 ... 1.0 (partial), 1.5
    present    an opened (and closed) SOLUTION      0, 0.3, 1.0
    steps      step lines in the reasoning          0.0, 0.1, 0.4, 0.7, 1.0
    =========  ===================================  ==========================

    so every total (:func:`total_reward`) lies in [-1.0, 7.5].
    """
    return {
        "correct": r_correct(completion, gold),
        "format": r_format(completion),
        "present": r_present(completion),
        "steps": r_steps(completion),
    }


def total_reward(completion: str, gold: str) -> float:
    """Sum of the four components, in [-1.0, 7.5].

    Rounded to 6 decimals only to hide float noise such as 0.7 + 0.3 + ...;
    every component is a multiple of 0.1, so nothing real is lost.
    """
    return round(sum(reward_components(completion, gold).values()), 6)


def _as_text(value) -> str:
    """A string for anything a caller may hand us; non-strings become ""."""
    return value if isinstance(value, str) else ""


def completion_text(completion) -> str:
    """Text of one completion as TRL passes it.

    Accepts a plain string, a chat-message list (the content of the last message is used), a single message
    dict, or message content given as a list of parts ({"type": "text", "text": ...}).  Anything else is "".
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)):
        completion = completion[-1] if completion else None
    if not isinstance(completion, dict):
        return ""
    content = completion.get("content")
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        return "".join(part for part in parts if isinstance(part, str))
    return _as_text(content)


def _golds(answer, n: int) -> list[str]:
    """Gold strings aligned with n completions; missing entries become ""."""
    if isinstance(answer, str):  # one gold for the whole batch
        return [answer] * n
    answers = list(answer) if isinstance(answer, (list, tuple)) else []
    answers = [_as_text(a) for a in answers]
    return (answers + [""] * n)[:n]


def _texts(completions) -> list[str]:
    if not isinstance(completions, (list, tuple)):
        return []
    return [completion_text(c) for c in completions]


def reward_correct(completions, answer=None, **kwargs) -> list[float]:
    """TRL reward function for r_correct; ``answer`` is the gold column."""
    texts = _texts(completions)
    return [r_correct(text, gold) for text, gold in zip(texts, _golds(answer, len(texts)))]


def reward_format(completions, answer=None, **kwargs) -> list[float]:
    """TRL reward function for r_format."""
    return [r_format(text) for text in _texts(completions)]


def reward_present(completions, answer=None, **kwargs) -> list[float]:
    """TRL reward function for r_present."""
    return [r_present(text) for text in _texts(completions)]


def reward_steps(completions, answer=None, **kwargs) -> list[float]:
    """TRL reward function for r_steps."""
    return [r_steps(text) for text in _texts(completions)]


TRL_REWARD_FUNCS = [reward_correct, reward_format, reward_present, reward_steps]
