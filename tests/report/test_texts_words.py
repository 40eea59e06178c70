"""The report's words are Jinja2 macros: every argument is filled or the fill fails, naming template and field."""

import re
from pathlib import Path

import pytest

from saah_lab.report import texts
from saah_lab.report.texts import TemplateError, Words, say


def _file(tmp_path, text: str) -> Words:
    path = tmp_path / "t.jinja"
    path.write_text(text)
    return Words(path)


def test_a_macro_fills_latex_braces_and_keeps_its_lines(tmp_path):
    words = _file(tmp_path, "{# a comment #}\n{% macro prose(x, a, f) %}A {{x}} at $\\alpha={{a}}$, in "
                            "\\texttt{ {{- f -}} }.{% endmacro %}\n"
                            "{% macro table(body) -%}\n\\begin{x}\n{{body}} \\\\\n\\end{x}\n{%- endmacro %}\n")
    assert words("prose", x="b", a="0.5", f="t.csv") == "A b at $\\alpha=0.5$, in \\texttt{t.csv}."
    assert words("table", body="1 & 2") == "\\begin{x}\n1 & 2 \\\\\n\\end{x}"


def test_a_missing_value_names_the_template_and_the_field(tmp_path):
    words = _file(tmp_path, "{% macro closing(diff, ci) %}final Pass@1 differs by {{diff}} ({{ci}}).{% endmacro %}")
    with pytest.raises(TemplateError, match=re.escape("template 'closing' (t.jinja): parameter 'ci' was not provided")):
        words("closing", diff="+0.011")
    with pytest.raises(TemplateError, match=re.escape("ci is None")):  # None is no value either
        words("closing", diff="+0.011", ci=None)
    with pytest.raises(TemplateError, match=re.escape("diff is 0.011; a value is text or a whole number")):
        words("closing", diff=0.011, ci="95% CI")
    assert words("closing", diff="", ci="x") == "final Pass@1 differs by  (x)."  # an empty clause is a value


def test_a_planted_unknown_placeholder_is_caught(tmp_path):
    # the template asks for a field the code does not give: the fill fails instead of printing a blank
    words = _file(tmp_path, "{% macro headline(study, a, diff) %}In our {{study}}, {{a}} minus GRPO is {{dif}}."
                            "{% endmacro %}")
    with pytest.raises(TemplateError, match=re.escape("template 'headline' (t.jinja): 'dif' is undefined")):
        words("headline", study="mini study", a="SA", diff="+0.01")
    # a value the template has no place for is an error too: the two have drifted apart
    with pytest.raises(TemplateError, match=re.escape("takes no keyword argument 'dif'")):
        words("headline", study="mini study", a="SA", dif="+0.01", diff="+0.01")
    with pytest.raises(TemplateError, match="no template named 'headlne'"):
        words("headlne")


@pytest.mark.parametrize("text, error", [
    ("{% macro a(b) %}x {{ b } y{% endmacro %}", "the template file cannot be read"),
    ("{% macro a() %}x{% endmacro %}{% macro a() %}y{% endmacro %}", "template 'a' is empty or defined twice"),
    ("{% macro a() %}x{% endmacro %}{% macro b() %}{% endmacro %}", "template 'b' is empty or defined twice"),
    ("{% macro a() %}x{% endmacro", "the template file cannot be read"),
])
def test_a_malformed_template_file_fails_when_read(tmp_path, text, error):
    with pytest.raises(TemplateError, match=re.escape(error)):
        _file(tmp_path, text)


def test_every_template_is_used_by_the_module():
    modules = ("texts.py", "tables.py", "settings.py")
    source = "".join(Path(texts.__file__).with_name(module).read_text() for module in modules)
    unused = [name for name in say.names if f'"{name}"' not in source]
    assert unused == [], f"templates of {say.path.name} that {', '.join(modules)} never name: {unused}"


# ---------------------------------------------------------------------- a damaged template file is refused

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def _repeated(text: str) -> re.Match:
    """The first placeholder of a macro that holds it twice (the evidence's [floor])."""
    for match in PLACEHOLDER.finditer(text):
        if text.count(match.group(), match.end(), text.find("{% endmacro", match.end())):
            return match
    raise AssertionError("no template repeats a placeholder")


def _one_line_macro(text: str) -> re.Match:
    """The first macro with an argument, on one line."""
    return re.search(r"^\{% macro (\w+)\((\w+)[^)]*\) %\}.*\{% endmacro %\}\n", text, re.M)


def _swap(text: str, match: re.Match, new: str) -> str:
    return text[:match.start()] + new + text[match.end():]


DAMAGES = {
    "placeholder removed": lambda t: _swap(t, _repeated(t), ""),
    "placeholder repeated": lambda t: _swap(t, _repeated(t), _repeated(t).group() * 2),
    "opening brace lost": lambda t: _swap(t, _repeated(t), _repeated(t).group()[1:]),
    "closing brace lost": lambda t: _swap(t, _repeated(t), _repeated(t).group()[:-1]),
    "cut by 2 bytes": lambda t: t[:-2],
    "last line cut": lambda t: t[:t.rstrip("\n").rfind("\n") + 1],
    "template removed": lambda t: _swap(t, _one_line_macro(t), ""),
    "template renamed": lambda t: _swap(t, _one_line_macro(t), _one_line_macro(t).group().replace("(", "x(", 1)),
    "unknown placeholder added": lambda t: _swap(t, _one_line_macro(t), _one_line_macro(t).group().replace(
        "{% endmacro", "{{unknown}}{% endmacro")),
    "argument dropped": lambda t: _swap(t, _one_line_macro(t), _one_line_macro(t).group().replace(
        f"({_one_line_macro(t).group(2)}", "(", 1)),
    "template emptied": lambda t: _swap(t, _one_line_macro(t), re.sub(r" %\}.*\{% endmacro", " %}{% endmacro",
                                                                      _one_line_macro(t).group())),
    "file deleted": None,
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_every_damage_to_the_template_file_is_refused_naming_the_file(tmp_path, damage):
    copy = tmp_path / say.path.name
    text = say.path.read_text()
    if DAMAGES[damage]:
        copy.write_text(DAMAGES[damage](text))
        assert copy.read_text() != text
    with pytest.raises(TemplateError, match=re.escape(str(copy))):
        Words(copy, structure=say.structure)


def test_an_intact_template_file_reads_as_the_shipped_one(tmp_path):
    copy = tmp_path / say.path.name
    copy.write_text(say.path.read_text())
    assert Words(copy, structure=say.structure).names == say.names
