"""Named text templates: the report's words live in text files beside the code, which only computes the values.

A template file holds one block per template: a line ``[name] text`` (prose; the indented lines that follow are
joined to it by single spaces, so a long sentence may be wrapped) or a line ``[name:lines]`` followed by LaTeX
whose line breaks matter. Lines starting with ``#`` are comments. A placeholder is ``{{field}}``: ``$``, ``%``
and single braces belong to LaTeX.

Filling is strict both ways, so that a renamed field or a typo fails loudly instead of printing a blank: every
placeholder needs a value (a str or an int; a float is formatted by the caller, to its quantity's decimals), and
every value given needs a placeholder. Where a case needs other words, the caller picks another template.

A damaged file is refused when read, naming it and what is wrong: it must end with the line :data:`END` (a cut
file does not), no template may be empty or have unbalanced braces (a lost brace leaves a placeholder as text),
and its templates' names and placeholder counts must give the digest its reader expects (``structure``).
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections import Counter
from pathlib import Path

HEADER = re.compile(r"\[(\w+)(:lines\]$|\] ?)")
#: The last line of every template file: a file that does not end with it was cut short.
END = "# end of the templates: this line stays last, so that a file cut short is refused"


class TemplateError(ValueError):
    """A template that cannot be filled: unknown, malformed, or given the wrong fields."""


class _Template(string.Template):
    # [^{}]* in the invalid branch lets \texttt{{{field}}} read as LaTeX braces around a placeholder, not an error
    pattern = (r"\{\{(?:(?P<named>[_a-z][_a-z0-9]*)\}\}|(?P<braced>(?!))|(?P<escaped>(?!))"
               r"|(?P<invalid>[^{}]*)\}\})")


class Templates:
    """The templates of one file, filled by calling: ``say("name", field=value, ...)``."""

    def __init__(self, path: str | Path, structure: str | None = None):
        """Read ``path``; ``structure``: the digest its templates' names, kinds and placeholder counts must give
        (None: not checked)."""
        self.path = Path(path)
        self.templates: dict[str, _Template] = {}
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise TemplateError(f"{self.path}: the template file cannot be read ({error})") from None
        if not text.endswith(f"\n{END}\n"):
            raise TemplateError(f"{self.path} does not end with its last line {END!r}: it was cut short, or text "
                                "follows that line")
        shape = []
        for name, keep_lines, body in self._blocks(text):
            if name in self.templates:
                raise TemplateError(f"{self.path}: template {name!r} is defined twice")
            self.templates[name] = template = self._template(name, keep_lines, body)
            counts = Counter(m.group("named") for m in template.pattern.finditer(template.template))
            shape.append([name, keep_lines, sorted((k, n) for k, n in counts.items() if k)])
        self.structure = hashlib.sha256(json.dumps(sorted(shape)).encode()).hexdigest()[:16]
        if structure is not None and self.structure != structure:
            raise TemplateError(
                f"{self.path}: its templates' names and placeholders are not the ones the code fills (structure "
                f"{self.structure}, the code expects {structure}): a template was lost, renamed or added, or a "
                "placeholder lost, repeated or added. A change made on purpose gives the new structure to the "
                "code that reads the file.")

    def _blocks(self, text: str) -> list[tuple[str, bool, list[str]]]:
        blocks: list[tuple[str, bool, list[str]]] = []
        for line in text.splitlines():
            header = HEADER.match(line)
            if header:
                blocks.append((header.group(1), header.group(2).startswith(":"), [line[header.end():]]))
            elif blocks and not line.startswith("#"):
                blocks[-1][2].append(line)
            elif line.strip() and not line.startswith("#"):
                raise TemplateError(f"{self.path}: text before the first [name] line: {line!r}")
        return blocks

    def _template(self, name: str, keep_lines: bool, body: list[str]) -> _Template:
        """One template's text, checked: not empty, braces balanced, placeholders well formed."""
        text = "\n".join(body[1:]).strip("\n") if keep_lines else " ".join(s.strip() for s in body if s.strip())
        where = f"{self.path}: template {name!r}"
        if not text.strip():
            raise TemplateError(f"{where} is empty")
        depth = 0
        for char in text:
            depth += {"{": 1, "}": -1}.get(char, 0)
            if depth < 0:
                break
        if depth:
            raise TemplateError(f"{where} has unbalanced braces (a {'}' if depth < 0 else '{'} too many): "
                                "a brace was lost or added")
        template = _Template(text)
        if not template.is_valid():
            raise TemplateError(f"{where} has a malformed placeholder")
        return template

    def fields(self, name: str) -> set[str]:
        if name not in self.templates:
            raise TemplateError(f"{self.path}: no template named {name!r}")
        return set(self.templates[name].get_identifiers())

    def __call__(self, name: str, **values) -> str:
        needed, where = self.fields(name), f"template {name!r} ({self.path.name})"
        missing = sorted(f for f in needed if values.get(f) is None)
        if missing:
            raise TemplateError(f"{where}: no value for {{{{{missing[0]}}}}}")
        unused = sorted(set(values) - needed)
        if unused:
            raise TemplateError(f"{where} has no placeholder {{{{{unused[0]}}}}}")
        wrong = sorted(f for f, v in values.items() if not isinstance(v, (str, int)) or isinstance(v, bool))
        if wrong:
            raise TemplateError(f"{where}: {{{{{wrong[0]}}}}} is a {type(values[wrong[0]]).__name__}; format it first")
        return self.templates[name].substitute(values)
