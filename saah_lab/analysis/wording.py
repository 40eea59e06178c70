"""Named text templates: the report's words live in text files beside the code, which only computes the values.

A template file holds one block per template: a line ``[name] text`` (prose; the indented lines that follow are
joined to it by single spaces, so a long sentence may be wrapped) or a line ``[name:lines]`` followed by LaTeX
whose line breaks matter. Lines starting with ``#`` are comments. A placeholder is ``{{field}}``: ``$``, ``%``
and single braces belong to LaTeX.

Filling is strict both ways, so that a renamed field or a typo fails loudly instead of printing a blank: every
placeholder needs a value (a str or an int; a float is formatted by the caller, to its quantity's decimals), and
every value given needs a placeholder. Where a case needs other words, the caller picks another template.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

HEADER = re.compile(r"\[(\w+)(:lines\]$|\] ?)")


class TemplateError(ValueError):
    """A template that cannot be filled: unknown, malformed, or given the wrong fields."""


class _Template(string.Template):
    # [^{}]* in the invalid branch lets \texttt{{{field}}} read as LaTeX braces around a placeholder, not an error
    pattern = (r"\{\{(?:(?P<named>[_a-z][_a-z0-9]*)\}\}|(?P<braced>(?!))|(?P<escaped>(?!))"
               r"|(?P<invalid>[^{}]*)\}\})")


class Templates:
    """The templates of one file, filled by calling: ``say("name", field=value, ...)``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.templates: dict[str, _Template] = {}
        blocks: list[tuple[str, bool, list[str]]] = []
        for line in self.path.read_text().splitlines():
            header = HEADER.match(line)
            if header:
                blocks.append((header.group(1), header.group(2).startswith(":"), [line[header.end():]]))
            elif blocks and not line.startswith("#"):
                blocks[-1][2].append(line)
            elif line.strip() and not line.startswith("#"):
                raise TemplateError(f"{self.path}: text before the first [name] line: {line!r}")
        for name, keep_lines, body in blocks:
            if name in self.templates:
                raise TemplateError(f"{self.path}: template {name!r} is defined twice")
            text = "\n".join(body[1:]).strip("\n") if keep_lines else " ".join(s.strip() for s in body if s.strip())
            self.templates[name] = _Template(text)
            if not self.templates[name].is_valid():
                raise TemplateError(f"{self.path}: template {name!r} has a malformed placeholder")

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
