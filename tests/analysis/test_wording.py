"""The report's words are templates: every placeholder is filled or the fill fails, naming template and field."""

import re
from pathlib import Path

import pytest

from saah_lab.analysis import sentences
from saah_lab.analysis.wording import END, TemplateError, Templates
from saah_lab.report import texts

USERS = [(sentences.say, Path(sentences.__file__)), (texts.say, Path(texts.__file__))]


def _file(tmp_path, text: str) -> Templates:
    path = tmp_path / "t.txt"
    path.write_text(f"{text}{END}\n")
    return Templates(path)


def test_prose_joins_its_lines_and_lines_templates_keep_theirs(tmp_path):
    say = _file(tmp_path, "# a comment\n[prose] A {{x}} at $\\alpha={{a}}$\n  wrapped, in \\texttt{{{f}}}.\n"
                          "[table:lines]\n\\begin{x}\n{{body}} \\\\\n\\end{x}\n")
    assert say("prose", x="b", a="0.5", f="t.csv") == "A b at $\\alpha=0.5$ wrapped, in \\texttt{t.csv}."
    assert say("table", body="1 & 2") == "\\begin{x}\n1 & 2 \\\\\n\\end{x}"
    assert say.fields("prose") == {"x", "a", "f"}


def test_a_missing_value_names_the_template_and_the_field(tmp_path):
    say = _file(tmp_path, "[closing] final Pass@1 differs by {{diff}} ({{ci}}).\n")
    with pytest.raises(TemplateError, match=re.escape("template 'closing' (t.txt): no value for {{ci}}")):
        say("closing", diff="+0.011")
    with pytest.raises(TemplateError, match=re.escape("no value for {{ci}}")):  # None is no value either
        say("closing", diff="+0.011", ci=None)
    with pytest.raises(TemplateError, match=re.escape("{{diff}} is a float; format it first")):
        say("closing", diff=0.011, ci="95% CI")
    assert say("closing", diff="", ci="x") == "final Pass@1 differs by  (x)."  # an empty clause is a value


def test_a_planted_unknown_placeholder_is_caught(tmp_path):
    # the template asks for a field the code does not give: the fill fails instead of printing a blank
    say = _file(tmp_path, "[headline] In our {{study}}, {{a}} minus GRPO is {{dif}}.\n")
    with pytest.raises(TemplateError, match=re.escape("template 'headline' (t.txt): no value for {{dif}}")):
        say("headline", study="mini study", a="SA", diff="+0.01")
    # a value the template has no place for is an error too: the two have drifted apart
    with pytest.raises(TemplateError, match=re.escape("has no placeholder {{diff}}")):
        say("headline", study="mini study", a="SA", dif="+0.01", diff="+0.01")
    with pytest.raises(TemplateError, match="no template named 'headlne'"):
        say("headlne")


@pytest.mark.parametrize("text, error", [
    ("[a] x {{ b }} y\n", "template 'a' has a malformed placeholder"),
    ("[a] x\n[a] y\n", "template 'a' is defined twice"),
    ("stray words\n[a] x\n", "text before the first"),
    ("[a] x\n[b]\n", "template 'b' is empty"),
    ("[a] x {{b} y\n", "template 'a' has unbalanced braces (a { too many)"),
])
def test_a_malformed_template_file_fails_when_read(tmp_path, text, error):
    with pytest.raises(TemplateError, match=re.escape(error)):
        _file(tmp_path, text)


@pytest.mark.parametrize("say, module", USERS, ids=["evidence", "report"])
def test_every_template_is_used_by_its_module(say, module):
    source = module.read_text()
    unused = [name for name in say.templates if f'"{name}"' not in source]
    assert unused == [], f"templates of {say.path.name} that {module.name} never names: {unused}"


# ---------------------------------------------------------------------- a damaged template file is refused

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def _repeated(text: str) -> re.Match:
    """The first placeholder of a template that holds it twice (one file's [floor], the other's [real_model])."""
    for match in PLACEHOLDER.finditer(text):
        block_end = text.find("\n[", match.end())
        if text.count(match.group(), match.end(), len(text) if block_end < 0 else block_end):
            return match
    raise AssertionError("no template repeats a placeholder")


def _single_line_header(text: str) -> re.Match:
    """The first template of one line (the next line starts another template or a comment)."""
    return re.search(r"^\[(\w+)\] .*\n(?=[\[#])", text, re.M)


def _swap(text: str, match: re.Match, new: str) -> str:
    return text[:match.start()] + new + text[match.end():]


DAMAGES = {
    "placeholder removed": lambda t: _swap(t, _repeated(t), ""),
    "placeholder repeated": lambda t: _swap(t, _repeated(t), _repeated(t).group() * 2),
    "opening brace lost": lambda t: _swap(t, _repeated(t), _repeated(t).group()[1:]),
    "closing brace lost": lambda t: _swap(t, _repeated(t), _repeated(t).group()[:-1]),
    "cut by 2 bytes": lambda t: t[:-2],
    "template removed": lambda t: _swap(t, _single_line_header(t), ""),
    "template renamed": lambda t: _swap(t, _single_line_header(t), _single_line_header(t).group().replace("]", "x]", 1)),
    "unknown placeholder added": lambda t: _swap(t, _single_line_header(t),
                                                 _single_line_header(t).group()[:-1] + " {{unknown}}\n"),
    "template emptied": lambda t: _swap(t, _single_line_header(t), f"[{_single_line_header(t).group(1)}]\n"),
    "file deleted": None,
}


@pytest.mark.parametrize("say", [sentences.say, texts.say], ids=["evidence", "report"])
@pytest.mark.parametrize("damage", DAMAGES)
def test_every_damage_to_a_template_file_is_refused_naming_the_file(tmp_path, say, damage):
    copy = tmp_path / say.path.name
    text = say.path.read_text()
    if DAMAGES[damage]:
        copy.write_text(DAMAGES[damage](text))
        assert copy.read_text() != text
    with pytest.raises(TemplateError, match=re.escape(str(copy))):
        Templates(copy, structure=say.structure)


@pytest.mark.parametrize("say", [sentences.say, texts.say], ids=["evidence", "report"])
def test_an_intact_template_file_reads_as_the_shipped_one(tmp_path, say):
    copy = tmp_path / say.path.name
    copy.write_text(say.path.read_text())
    intact = Templates(copy, structure=say.structure)
    assert {k: t.template for k, t in intact.templates.items()} == {k: t.template for k, t in say.templates.items()}
