"""Tests for saah_lib.method.reward.  Every expected value below is worked out by hand."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saah_lib.method.reward import (
    TAGS,
    TRL_REWARD_FUNCS,
    answers_match,
    extract_answer,
    normalize_number,
    r_correct,
    r_format,
    r_present,
    r_steps,
    reward_components,
    reward_correct,
    reward_format,
    reward_present,
    reward_steps,
    total_reward,
)

FULL_CREDIT = """<start_working_out>
Janet's ducks lay 16 eggs a day.
She eats 3 and bakes with 4, so 16 - 3 - 4 = 9 eggs are left.
Each egg sells for $2, so 9 * 2 = $18.
Check: 18 / 2 = 9 eggs.
Check: 9 + 3 + 4 = 16 eggs.
Check: 3 + 4 = 7 eggs used.
</start_working_out>
<SOLUTION>18</SOLUTION>"""


def test_tags_in_order():
    assert TAGS == ("<start_working_out>", "</start_working_out>", "<SOLUTION>", "</SOLUTION>")


# --------------------------------------------------------------------------
# paper's worked examples
# --------------------------------------------------------------------------


def test_paper_full_credit_example_totals_7_5():
    assert reward_components(FULL_CREDIT, "18") == {
        "correct": 4.0,
        "format": 1.5,
        "present": 1.0,
        "steps": 1.0,
    }
    assert total_reward(FULL_CREDIT, "18") == 7.5


def test_paper_partial_credit_example_totals_4_1():
    completion = "Janet sells the eggs that are left over, and she makes 18 dollars."
    assert reward_components(completion, "18") == {
        "correct": 4.0,
        "format": 0.0,
        "present": 0.0,
        "steps": 0.1,
    }
    assert total_reward(completion, "18") == 4.1


# --------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<SOLUTION>1,234</SOLUTION>", "1234"),
        ("<SOLUTION>$1,234,567</SOLUTION>", "1234567"),
        ("<SOLUTION>$18</SOLUTION>", "18"),
        ("<SOLUTION>18.</SOLUTION>", "18"),
        ("The answer is 18.", "18"),
        ("<SOLUTION>-3</SOLUTION>", "-3"),
        ("<SOLUTION>-$3</SOLUTION>", "-3"),
        ("<SOLUTION>$-3</SOLUTION>", "-3"),
        ("<SOLUTION>2.5</SOLUTION>", "2.5"),
        ("<SOLUTION>18.00</SOLUTION>", "18"),
        ("<SOLUTION>0.50</SOLUTION>", "0.5"),
        ("<SOLUTION>007</SOLUTION>", "7"),
        ("<SOLUTION>-0</SOLUTION>", "0"),
        ("<SOLUTION>1,234.50</SOLUTION>", "1234.5"),
        ("<SOLUTION>12 apples and 15 pears</SOLUTION>", "15"),
        # a hyphen between numbers is subtraction, not a sign
        ("<SOLUTION>20-4</SOLUTION>", "4"),
        # not thousands grouping -> separate numbers
        ("<SOLUTION>3,4,5</SOLUTION>", "5"),
        ("<SOLUTION>1,2345</SOLUTION>", "2345"),
        # unclosed block: read to the end of the text
        ("<start_working_out>2+2=4</start_working_out><SOLUTION> 42", "42"),
        # only the first SOLUTION block counts
        ("<SOLUTION>7</SOLUTION> and <SOLUTION>8</SOLUTION>", "7"),
        # no SOLUTION tag: the last number anywhere
        ("First 5, then 6, so the total is 11 apples", "11"),
        ("</SOLUTION>9", "9"),
        # numbers only outside the block: the block decides, and it has none
        ("12 + 30 = 42 <SOLUTION>forty-two</SOLUTION> 42", None),
        ("<SOLUTION></SOLUTION>", None),
        ("<SOLUTION>", None),
        ("no digits here", None),
        ("", None),
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("1,234", "1234"), ("$18", "18"), (" 18.00 ", "18"), ("-0.50", "-0.5"), ("100", "100"),
     ("18.", "18"), ("abc", None), ("", None), ("1.2.3", None), (None, None)],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@pytest.mark.parametrize(
    "pred, gold, expected",
    [("18", "18", True), ("18.0", "18", True), ("18.00", "18.0", True), ("-3", "-3", True),
     ("0.1", "0.10", True), ("1234", "1,234", True), ("18", "19", False), ("-3", "3", False),
     (None, "18", False), ("18", "", False), ("18.000000000000001", "18", False)],
)
def test_answers_match(pred, gold, expected):
    assert answers_match(pred, gold) is expected


# --------------------------------------------------------------------------
# r_correct
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("<SOLUTION>18</SOLUTION>", "18", 4.0),
        ("<SOLUTION>18.0</SOLUTION>", "18", 4.0),
        ("<SOLUTION>1,234</SOLUTION>", "1234", 4.0),
        ("<SOLUTION>110</SOLUTION>", "100", 1.5),  # exactly 10% above
        ("<SOLUTION>90</SOLUTION>", "100", 1.5),  # exactly 10% below
        ("<SOLUTION>-95</SOLUTION>", "-100", 1.5),  # negative gold, 5% off
        ("<SOLUTION>111</SOLUTION>", "100", 0.0),  # 11% off
        ("<SOLUTION>89.9</SOLUTION>", "100", 0.0),
        ("<SOLUTION>1</SOLUTION>", "0", 0.0),  # zero gold: only exact counts
        ("<SOLUTION>0</SOLUTION>", "0", 4.0),
        ("<SOLUTION>7</SOLUTION>", "", 0.0),  # no usable gold
        ("<SOLUTION>none</SOLUTION>", "18", -0.5),
        ("I do not know.", "18", -0.5),
        ("", "18", -0.5),
    ],
)
def test_r_correct(completion, gold, expected):
    assert r_correct(completion, gold) == expected


# --------------------------------------------------------------------------
# r_format
# --------------------------------------------------------------------------

W_OPEN, W_CLOSE, S_OPEN, S_CLOSE = TAGS


@pytest.mark.parametrize(
    "completion, expected",
    [
        (f"{W_OPEN}2 + 2 = 4{W_CLOSE}{S_OPEN}4{S_CLOSE}", 1.5),
        (f"{W_OPEN}\n 2 + 2 = 4 \n{W_CLOSE}\n\n{S_OPEN} 4 {S_CLOSE}\n", 1.5),
        # duplicates
        (f"{W_OPEN}a{W_CLOSE}{S_OPEN}4{S_CLOSE}{S_CLOSE}", -0.5),
        (f"{W_OPEN}{W_OPEN}a{W_CLOSE}{S_OPEN}4{S_CLOSE}", -0.5),
        (f"{S_OPEN}4{S_CLOSE}{S_OPEN}4{S_CLOSE}", -0.5),
        (f"{W_CLOSE}{W_CLOSE}", -0.5),
        # all four, wrong order: partial sum 0.2 + 0.3 + 0.2 + 0.3
        (f"{S_OPEN}4{S_CLOSE}{W_OPEN}a{W_CLOSE}", 1.0),
        (f"{W_CLOSE}a{W_OPEN}{S_OPEN}4{S_CLOSE}", 1.0),
        # all four in order, a block empty or blank: partial sum
        (f"{W_OPEN}{W_CLOSE}{S_OPEN}4{S_CLOSE}", 1.0),
        (f"{W_OPEN}a{W_CLOSE}{S_OPEN} \n {S_CLOSE}", 1.0),
        # single tags and pairs
        (f"{W_OPEN}", 0.2),
        (f"{W_CLOSE}", 0.3),
        (f"{S_OPEN}", 0.2),
        (f"{S_CLOSE}", 0.3),
        (f"{W_OPEN}a{W_CLOSE}", 0.5),
        (f"{S_OPEN}4{S_CLOSE}", 0.5),
        (f"{W_OPEN}{S_OPEN}", 0.4),
        (f"{W_CLOSE}{S_CLOSE}", 0.6),
        (f"{W_OPEN}a{W_CLOSE}{S_OPEN}4", 0.7),
        (f"{W_OPEN}a{S_OPEN}4{S_CLOSE}", 0.7),
        (f"{W_OPEN}a{W_CLOSE}4{S_CLOSE}", 0.8),
        (f"a{W_CLOSE}{S_OPEN}4{S_CLOSE}", 0.8),
        ("plain text, 42", 0.0),
        ("", 0.0),
    ],
)
def test_r_format(completion, expected):
    assert r_format(completion) == expected


def test_closing_tags_are_not_counted_as_opening_tags():
    # "</start_working_out>" must not count as a second "<start_working_out>",
    # and "</SOLUTION>" not as a second "<SOLUTION>".
    assert r_format(f"{W_CLOSE}") == 0.3
    assert r_format(f"{S_CLOSE}") == 0.3
    assert r_format(f"{W_OPEN}a{W_CLOSE}{S_OPEN}1{S_CLOSE}") == 1.5


def test_tag_match_is_case_sensitive():
    assert r_format("<solution>4</solution>") == 0.0


# --------------------------------------------------------------------------
# r_present
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected",
    [
        (f"{S_OPEN}4{S_CLOSE}", 1.0),
        (f"{S_OPEN}{S_CLOSE}", 1.0),
        (f"x {S_OPEN} 4", 0.3),
        (f"{S_CLOSE} then {S_OPEN}4", 0.3),  # the close must come after the open
        (f"{S_CLOSE}", 0.0),
        ("18", 0.0),
        ("", 0.0),
    ],
)
def test_r_present(completion, expected):
    assert r_present(completion) == expected


# --------------------------------------------------------------------------
# r_steps
# --------------------------------------------------------------------------


def _working(*lines):
    return W_OPEN + "\n" + "\n".join(lines) + "\n" + W_CLOSE + S_OPEN + "1" + S_CLOSE


@pytest.mark.parametrize(
    "completion, expected",
    [
        # empty or blank reasoning
        ("", 0.0),
        ("   \n\t", 0.0),
        (f"{W_OPEN}  \n {W_CLOSE}{S_OPEN}5{S_CLOSE}", 0.0),
        (f"{S_OPEN}5{S_CLOSE}", 0.0),  # nothing but the solution block
        (f"{S_OPEN}2 + 3 = 5", 0.0),  # unclosed block swallows the rest
        # no step lines
        (_working("I think about it carefully."), 0.1),
        (_working("x = y", "a = 3", "3 ="), 0.1),  # no digit before "=" / none after
        (_working("3.5 kg of flour is plenty"), 0.1),  # "3." starting a decimal
        (_working("Steps are good"), 0.1),
        # 1-2 steps
        (_working("2 + 3 = 5"), 0.4),
        (_working("2 + 3 = 5 and 5 * 2 = 10"), 0.4),  # one line, one step
        (_working("Step 1: add them", "blah"), 0.4),
        (_working("9 * 2 = $18", "total = -3"), 0.4),
        # 3-4 steps
        (_working("1.", "2)", "STEP 3 mix"), 0.7),
        (_working("  step 4: a", "2 + 2 = 4", "4 + 4 = 8", "4 + 4 = -8"), 0.7),
        # 5 or more steps
        (_working("1 + 1 = 2", "2 + 1 = 3", "3 + 1 = 4", "4 + 1 = 5", "5 + 1 = 6"), 1.0),
        (_working(*[f"{i}. go" for i in range(1, 9)]), 1.0),
    ],
)
def test_r_steps(completion, expected):
    assert r_steps(completion) == expected


def test_r_steps_without_tags_reads_everything_but_the_solution_block():
    text = "2 + 3 = 5\n5 * 2 = 10\n10 - 1 = 9\n<SOLUTION>\n1 + 1 = 2\n2 + 2 = 4\n</SOLUTION>"
    assert r_steps(text) == 0.7  # 3 lines outside; the 2 inside are ignored


def test_r_steps_uses_only_the_working_block_when_closed():
    text = f"1 + 1 = 2\n2 + 2 = 4\n{W_OPEN}\nthinking\n{W_CLOSE}\n{S_OPEN}4{S_CLOSE}"
    assert r_steps(text) == 0.1


def test_r_steps_unclosed_working_block_falls_back_to_whole_text():
    # The opening tag is stripped (turned into a line break), so "1." starts a line.
    text = f"{W_OPEN}1. first\n2 + 2 = 4\n{S_OPEN}4{S_CLOSE}"
    assert r_steps(text) == 0.4


def test_r_steps_closing_before_opening_falls_back_to_whole_text():
    text = f"{W_CLOSE}\n1 + 1 = 2\n{W_OPEN}\n{S_OPEN}2{S_CLOSE}"
    assert r_steps(text) == 0.4


# --------------------------------------------------------------------------
# TRL adapters
# --------------------------------------------------------------------------


def test_trl_functions_accept_strings_and_message_lists():
    as_strings = [FULL_CREDIT, "the answer is 7"]
    as_messages = [[{"role": "assistant", "content": c}] for c in as_strings]
    gold = ["18", "18"]
    expected = {
        reward_correct: [4.0, 0.0],
        reward_format: [1.5, 0.0],
        reward_present: [1.0, 0.0],
        reward_steps: [1.0, 0.1],
    }
    for func, values in expected.items():
        assert func(as_strings, answer=gold) == values
        assert func(as_messages, answer=gold, prompts=["p", "p"], trainer_state=None) == values
    assert TRL_REWARD_FUNCS == [reward_correct, reward_format, reward_present, reward_steps]


def test_trl_functions_take_the_last_message_and_content_parts():
    conversation = [
        {"role": "user", "content": "<SOLUTION>1</SOLUTION>"},
        {"role": "assistant", "content": [{"type": "text", "text": "<SOLUTION>18</SOLUTION>"}]},
    ]
    assert reward_correct([conversation], answer=["18"]) == [4.0]


def test_trl_functions_survive_malformed_input():
    completions = [None, [], [{"role": "assistant", "content": None}], [{"content": 5}], 7, "42"]
    for func in TRL_REWARD_FUNCS:
        values = func(completions, answer=["42", None, 3, "x"])
        assert len(values) == len(completions)
        assert all(isinstance(v, float) for v in values)
    # malformed entries behave as empty strings; a missing gold gives no match
    assert reward_correct(completions, answer=None) == [-0.5] * 5 + [0.0]
    assert reward_steps(completions) == [0.0] * 5 + [0.1]
    assert reward_format(None) == []


def test_public_functions_treat_non_strings_as_empty():
    for value in (None, 12, b"<SOLUTION>1</SOLUTION>"):
        assert total_reward(value, "1") == -0.5  # -0.5 + 0 + 0 + 0.0
    assert extract_answer(None) is None


# --------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    list(TAGS)
    + ["18", "-3", "1,234", "$5", "2.5", "18.", " = ", " + ", "Step 2:", "\n", "1.", " ", "x", "-", "\u2212", ".5", "e3", "e9999"]
)
TAGGED_TEXT = st.lists(FRAGMENTS, max_size=30).map("".join)
GOLD = st.sampled_from(["18", "-3", "1234", "0", "2.5", ""])


def test_the_bounds_the_log_reader_checks_are_the_rewards_extremes():
    from saah_lib.method.reward import COMPONENT_BOUNDS, MAX_TOTAL, MIN_TOTAL

    # hand-computed extremes of the table in the module docstring
    assert COMPONENT_BOUNDS == {"correct": (-0.5, 4.0), "format": (-0.5, 1.5), "present": (0.0, 1.0),
                                "steps": (0.0, 1.0)}
    assert (MIN_TOTAL, MAX_TOTAL) == (-1.0, 7.5)
    # both are reached: no number, a repeated tag, no SOLUTION, blank reasoning; and full credit
    worst = "<start_working_out><start_working_out>"
    assert reward_components(worst, "18") == {"correct": -0.5, "format": -0.5, "present": 0.0, "steps": 0.0}
    assert total_reward(worst, "18") == MIN_TOTAL and total_reward(FULL_CREDIT, "18") == MAX_TOTAL


def _check_bounds(completion, gold):
    components = reward_components(completion, gold)
    assert components["correct"] in {-0.5, 0.0, 1.5, 4.0}
    assert components["format"] in {-0.5, 0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.5}
    assert components["present"] in {0.0, 0.3, 1.0}
    assert components["steps"] in {0.0, 0.1, 0.4, 0.7, 1.0}
    assert -1.0 <= total_reward(completion, gold) <= 7.5


@settings(max_examples=300, deadline=None)
@given(st.text(), GOLD)
def test_any_text_never_raises_and_stays_in_range(completion, gold):
    _check_bounds(completion, gold)
    extract_answer(completion)


@settings(max_examples=300, deadline=None)
@given(TAGGED_TEXT, GOLD)
def test_tagged_text_never_raises_and_stays_in_range(completion, gold):
    _check_bounds(completion, gold)


@settings(max_examples=100, deadline=None)
@given(st.text(), st.text())
def test_arbitrary_gold_never_raises(completion, gold):
    assert -1.0 <= total_reward(completion, gold) <= 7.5


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**30, 10**30), st.integers(0, 4))
def test_extracted_number_round_trips(value, decimals):
    text = f"{value / 10**decimals:.{decimals}f}" if abs(value) < 10**15 else str(value)
    assert answers_match(extract_answer(f"<SOLUTION>{text}</SOLUTION>"), text)


# --------------------------------------------------------------------------
# number forms: Unicode minus signs, leading-dot decimals, exponent notation
# (each either read as the number it denotes or unparseable, never another)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected",
    [
        # Unicode minus signs are signs, exactly like "-"
        ("<SOLUTION>\u22125</SOLUTION>", "-5"),  # U+2212 MINUS SIGN
        ("<SOLUTION>\u20125</SOLUTION>", "-5"),  # U+2012 FIGURE DASH
        ("<SOLUTION>\u20135</SOLUTION>", "-5"),  # U+2013 EN DASH
        ("<SOLUTION>\ufe635</SOLUTION>", "-5"),  # U+FE63 SMALL HYPHEN-MINUS
        ("<SOLUTION>\uff0d5</SOLUTION>", "-5"),  # U+FF0D FULLWIDTH HYPHEN-MINUS
        ("<SOLUTION>\u2212$1,234.50</SOLUTION>", "-1234.5"),
        ("<SOLUTION>$\u22123</SOLUTION>", "-3"),
        ("<SOLUTION>(\u22123)</SOLUTION>", "-3"),
        ("<SOLUTION>20\u22124</SOLUTION>", "4"),  # between numbers: subtraction, like "20-4"
        ("<SOLUTION>x\u22122</SOLUTION>", "2"),
        ("<SOLUTION>\u2014 5</SOLUTION>", "5"),  # an em dash is punctuation
        ("<SOLUTION>\u20105</SOLUTION>", "5"),  # so is a hyphen (U+2010)
        # leading-dot decimals
        ("<SOLUTION>.5</SOLUTION>", "0.5"),
        ("<SOLUTION>-.5</SOLUTION>", "-0.5"),
        ("<SOLUTION>\u2212.25</SOLUTION>", "-0.25"),
        ("<SOLUTION>$.50</SOLUTION>", "0.5"),
        ("The answer is .75.", "0.75"),
        ("<SOLUTION>1.2.3</SOLUTION>", "3"),  # never ".3"
        # exponent notation, read exactly
        ("<SOLUTION>2.5e3</SOLUTION>", "2500"),
        ("<SOLUTION>2.5E+3</SOLUTION>", "2500"),
        ("<SOLUTION>1e-3</SOLUTION>", "0.001"),
        ("<SOLUTION>-4.2e1</SOLUTION>", "-42"),
        ("<SOLUTION>1.e3</SOLUTION>", "1000"),
        ("<SOLUTION>.5e1</SOLUTION>", "5"),
        ("<SOLUTION>1,200e-2</SOLUTION>", "12"),
        ("<SOLUTION>2.5e\u22121</SOLUTION>", "0.25"),
        ("<SOLUTION>1e400</SOLUTION>", "1" + "0" * 400),
        ("<SOLUTION>0e99</SOLUTION>", "0"),
        ("<SOLUTION>5 eggs</SOLUTION>", "5"),  # an "e" without digits is a letter
        ("<SOLUTION>5e</SOLUTION>", "5"),
        # exponents too large to write out: unparseable, not another number
        ("<SOLUTION>1e1001</SOLUTION>", None),
        ("<SOLUTION>1e-1001</SOLUTION>", None),
        ("<SOLUTION>7e99999999999999999999</SOLUTION>", None),
        ("12 apples, so 3e5000", None),  # the last number decides; 12 is not used instead
    ],
)
def test_extract_answer_number_forms(completion, expected):
    assert extract_answer(completion) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("\u22125", "-5"), (".5", "0.5"), ("-.5", "-0.5"), ("$.5", "0.5"), ("2.5e3", "2500"),
     ("1E2", "100"), ("1e+0", "1"), ("12.5e-1", "1.25"), ("1e-3", "0.001"), ("-0e5", "0"), ("1.e2", "100"),
     ("1e1000", "1" + "0" * 1000), ("1e1001", None), ("1e-1001", None), ("1e" + "9" * 5000, None),
     ("inf", None), ("-inf", None), ("nan", None), ("Infinity", None), (".", None), ("-", None), ("e5", None),
     ("5e", None), ("1,2", None), ("12,34", None), ("1,234,567", "1234567"), ("--5", None)],
)
def test_normalize_number_forms(text, expected):
    assert normalize_number(text) == expected


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("<SOLUTION>\u22125</SOLUTION>", "-5", 4.0),
        ("<SOLUTION>\u22125</SOLUTION>", "5", 0.0),
        ("<SOLUTION>.5</SOLUTION>", "0.5", 4.0),
        ("<SOLUTION>.5</SOLUTION>", "5", 0.0),
        ("<SOLUTION>1e400</SOLUTION>", "400", 0.0),
        ("<SOLUTION>1e400</SOLUTION>", "1e400", 4.0),
        ("<SOLUTION>2.5e3</SOLUTION>", "2500", 4.0),
        ("<SOLUTION>2.6e3</SOLUTION>", "2500", 1.5),
        ("<SOLUTION>1e5000</SOLUTION>", "1", -0.5),  # unparseable: no answer
    ],
)
def test_r_correct_number_forms(completion, gold, expected):
    assert r_correct(completion, gold) == expected


def test_a_million_digit_answer_is_scored_without_overflow():
    # Decimal's default exponent limit is 999,999: the tolerance check must not overflow
    huge = "9" * 1_100_000
    assert r_correct(f"<SOLUTION>{huge}</SOLUTION>", "5") == 0.0
    assert r_correct(f"<SOLUTION>{huge}</SOLUTION>", huge) == 4.0
    assert r_correct(f"<SOLUTION>{huge}8</SOLUTION>", huge + "9") == 1.5


MINUS = st.sampled_from(["-", "\u2212", "\u2012", "\u2013", "\ufe63", "\uff0d"])


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**20, 10**20), st.integers(0, 6), MINUS)
def test_decimals_with_any_minus_sign_round_trip(value, decimals, minus):
    text = f"{abs(value) // 10**decimals}.{abs(value) % 10**decimals:0{decimals}d}" if decimals else str(abs(value))
    exact = ("-" if value < 0 else "") + text
    written = (minus if value < 0 else "") + text
    assert answers_match(extract_answer(f"<SOLUTION>{written}</SOLUTION>"), exact)
    assert answers_match(extract_answer(f"so the answer is {written}."), exact)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**12), st.integers(1, 12), st.booleans())
def test_leading_dot_decimals_round_trip(digits, places, negative):
    fraction = f"{digits % 10**places:0{places}d}"
    exact = f"{'-' if negative else ''}0.{fraction}"
    written = f"{'-' if negative else ''}.{fraction}"
    assert answers_match(extract_answer(f"<SOLUTION>{written}</SOLUTION>"), exact)


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**9, 10**9), st.integers(0, 4), st.integers(-30, 30), st.sampled_from(["e", "E"]))
def test_exponent_notation_reads_as_its_exact_value(mantissa, decimals, exponent, letter):
    from decimal import Decimal

    text = f"{Decimal(mantissa).scaleb(-decimals)}"  # e.g. "-12.345" (never itself in exponent form here)
    if "E" in text:
        text = f"{mantissa}"
        decimals = 0
    written = f"{text}{letter}{exponent}"
    exact = Decimal(mantissa).scaleb(exponent - decimals)
    got = extract_answer(f"<SOLUTION>{written}</SOLUTION>")
    assert got is not None and Decimal(got) == exact
    assert got == normalize_number(written)
