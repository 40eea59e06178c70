"""Every function of the packages, benchmarks and tools fits on a screen: at most 60 lines, decorators left out.

Read from the source (``ast``): a function's lines run from its ``def`` to its last statement.
"""

import ast

from saah_lib.paths import REPO_ROOT

MAX_FUNCTION_LINES = 60


def long_functions(sources: dict[str, str]) -> dict[str, int]:
    """``{"path:function": lines}`` for each function of ``sources`` (path -> text) over the limit."""
    found = {}
    for own, text in sorted(sources.items()):
        for node in ast.walk(ast.parse(text)):
            lines = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and lines > MAX_FUNCTION_LINES:
                found[f"{own}:{node.name}"] = lines
    return found


def test_every_function_is_at_most_60_lines():
    folders = ("saah_lib", "saah_lab", "bench", "tools")
    paths = [p for folder in folders for p in sorted((REPO_ROOT / folder).rglob("*.py"))]
    assert long_functions({p.relative_to(REPO_ROOT).as_posix(): p.read_text() for p in paths}) == {}


def test_the_length_check_counts_from_def_to_the_last_line():
    def function(name: str, body_lines: int) -> str:
        return f"@decorator\ndef {name}():\n" + "    x = 1\n" * body_lines

    planted = {"a.py": function("fits", MAX_FUNCTION_LINES - 1) + function("long", MAX_FUNCTION_LINES),
               "b.py": "class C:\n" + "".join("    " + line + "\n" for line in function("method", 70).splitlines())}
    assert long_functions(planted) == {"a.py:long": 61, "b.py:method": 71}
