"""The package's folders show its architecture: each layer imports only from the layers before it.

Read from the source (``ast``), not by importing, so a forbidden import is caught even where
it sits in a function that no test runs.
"""

import ast
from pathlib import Path

import pytest

from saah_lib.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "saah_lib"
#: Lowest first. A module may import from its own layer and the layers before it, never after.
LAYERS = ("paths", "jsonio", "numerics", "progress", "method", "tasks", "models", "rundir", "training", "analysis",
          "report", "studies")
#: The only imports allowed inside functions, and why: each keeps a heavy package out of a light entry point.
FUNCTION_LEVEL_IMPORTS = {
    # `python -m saah_lib.training.launch --print-config` answers without loading the model and training code
    ("training/launch.py", "saah_lib.training.run"),
    # the config checks a backend name without loading torch; only "auto" asks torch for a GPU
    ("models/backends.py", "torch"),
    # reading and checking results never needs torch; only a checkpoint's tensors do
    ("rundir/checkpoints.py", "safetensors"),
    ("rundir/checkpoints.py", "torch"),
    ("rundir/checkpoints.py", "transformers.trainer_pt_utils"),
    # `datasets` is slow to import and unused with local data
    ("tasks/gsm8k.py", "datasets"),
    ("tasks/prompts.py", "datasets"),
}


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(module: str) -> int:
    """Layer index of a dotted module name inside saah_lib (``saah_lib.method.loss`` -> method)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else -1


def _imports(path: Path):
    """(module imported, at module level?) for every import statement of a file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import on line {node.lineno}")
            yield node.module, id(node) in top, node.lineno


def _own(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_every_module_belongs_to_a_layer():
    for path in _modules():
        first = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        assert first in LAYERS or first in ("__init__", "__main__"), f"{_own(path)} lies outside the layers {LAYERS}"


def test_imports_go_down_the_layers_never_up():
    upward = []
    for path in _modules():
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue  # the package's lazy re-exports (PEP 562): nothing imported at import time
        own = _layer("saah_lib." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        for module, _, line in _imports(path):
            if module.startswith("saah_lib.") and _layer(module) > own:
                upward.append(f"{_own(path)}:{line} imports {module} ({LAYERS[_layer(module)]} is above "
                              f"{LAYERS[own]})")
    assert upward == []


def test_no_import_inside_a_function_except_the_listed_light_entry_points():
    found = set()
    for path in _modules():
        for module, at_top, _ in _imports(path):
            if not at_top:
                found.add((_own(path), module))
    assert found == FUNCTION_LEVEL_IMPORTS


def test_no_import_circle_between_modules():
    graph = {}
    for path in _modules():
        name = "saah_lib." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = {m for m, _, _ in _imports(path) if m.startswith("saah_lib.")}
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                pytest.fail("import circle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_notebooks_public_names_resolve():
    import saah_lib

    for name in saah_lib.__all__:
        assert getattr(saah_lib, name) is not None, name
