"""Ray through its public API only: an ``ast`` scan of saah_lib/ and tools/ for Ray's private parts.

Flagged: importing ``ray._private``, ``ray._raylet`` (any ``ray`` module path with a ``_`` part) or
``ray.experimental.internal_kv``; reading ``<ray name>._x`` or anything named ``global_worker``; assigning
to an attribute of a name imported from ``ray`` (``ray_constants.X = ...``, ``setattr(ray_mod, ...)``).
None is allowed: the two settings Ray reads once per process (the address lookup's switch and the auth mode)
reach it through the environment (saah_lab/studies/execution/engine.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

from saah_lib.paths import REPO_ROOT

SCANNED = ("saah_lib", "saah_lab", "tools")


def _private_module(path: str) -> bool:
    parts = path.split(".")
    return parts[0] == "ray" and (any(p.startswith("_") and not p.startswith("__") for p in parts[1:])
                                  or path == "ray.experimental.internal_kv"
                                  or path.startswith("ray.experimental.internal_kv."))


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def scan(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, what) for each use of Ray's private parts in ``source``."""
    tree = ast.parse(source, filename)
    ray_names = set()  # names bound by an import from ray: modules, classes, functions
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "ray" or alias.name.startswith("ray."):
                    ray_names.add(alias.asname or "ray")
                    if _private_module(alias.name):
                        found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            from_ray = node.level == 0 and node.module and (node.module == "ray" or node.module.startswith("ray."))
            for alias in node.names:
                if alias.name == "global_worker":
                    found.append((node.lineno, "global_worker"))
                if from_ray:
                    ray_names.add(alias.asname or alias.name)
                    if _private_module(f"{node.module}.{alias.name}"):
                        found.append((node.lineno, f"import {node.module}.{alias.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "global_worker":
                found.append((node.lineno, "global_worker"))
            elif (node.attr.startswith("_") and not node.attr.startswith("__")
                  and _root_name(node.value) in ray_names):
                found.append((node.lineno, f"attribute {ast.unparse(node)}"))
        elif isinstance(node, ast.Name) and node.id == "global_worker":
            found.append((node.lineno, "global_worker"))
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for part in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(part, (ast.Attribute, ast.Subscript)) and _root_name(part) in ray_names:
                    found.append((node.lineno, f"assign {ast.unparse(part)}"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
                and node.args and _root_name(node.args[0]) in ray_names):
            found.append((node.lineno, f"assign {ast.unparse(node.args[0])}.* by {node.func.id}"))
    return sorted(set(found))


def scan_tree(root: Path = REPO_ROOT) -> list[tuple[str, int, str]]:
    """(file, line, what) for every .py file under saah_lib/ and tools/."""
    found = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            found += [(relative, line, what) for line, what in scan(path.read_text(), relative)]
    return found


PLANTED = {
    "import ray._private.ray_constants as ray_constants": "import ray._private.ray_constants",
    "from ray._private import services": "import ray._private.services",
    "from ray import _private": "import ray._private",
    "from ray._raylet import Config": "import ray._raylet.Config",
    "import ray._raylet": "import ray._raylet",
    "from ray.experimental import internal_kv": "import ray.experimental.internal_kv",
    "from ray.experimental.internal_kv import _internal_kv_get": "import ray.experimental.internal_kv._internal_kv_get",
    "import ray\nnode = ray._private.worker.global_worker.node": "attribute ray._private",
    "import ray as r\nr._private": "attribute r._private",
    "import ray\nray.util._secret()": "attribute ray.util._secret",
    "from somewhere import global_worker": "global_worker",
    "worker = global_worker": "global_worker",
    "from ray.util import state\nstate.list_tasks = None": "assign state.list_tasks",
    "import ray\nray.util.x += 1": "assign ray.util.x",
    "import ray\nsetattr(ray.util, 'x', 1)": "assign ray.util.* by setattr",
    "import ray\nray.util.table['x'], y = 1, 2": "assign ray.util.table['x']",
}

PUBLIC = """
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address="auto", _node_ip_address="127.0.0.1")
node = ray.get_runtime_context().get_node_id()
print(ray.__version__, ray.util.get_node_ip_address(), ray.nodes())
config = {}
config["ray"] = ray.cloudpickle
other = object()
other._private = 1  # not a Ray name
"""


def test_the_scan_flags_each_kind_of_private_use_with_its_line():
    for snippet, what in PLANTED.items():
        last_line = snippet.count("\n") + 1
        assert (last_line, what) in scan(snippet), (snippet, scan(snippet))
    assert scan(PUBLIC) == []


def test_the_library_the_lab_and_tools_use_ray_through_its_public_api_only():
    found = [f"{path}:{line}: {what}" for path, line, what in scan_tree()]
    assert found == [], "Ray's private API used:\n" + "\n".join(found)


def test_the_tree_scan_names_the_file_and_line_of_a_planted_use(tmp_path):
    (tmp_path / "saah_lib" / "sub").mkdir(parents=True)
    (tmp_path / "tools").mkdir()
    (tmp_path / "saah_lib" / "sub" / "clean.py").write_text(PUBLIC)
    (tmp_path / "tools" / "dirty.py").write_text("import os\n\nfrom ray.experimental import internal_kv\n")
    assert scan_tree(tmp_path) == [("tools/dirty.py", 3, "import ray.experimental.internal_kv")]
