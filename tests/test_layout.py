"""The folders show the architecture: two packages, the library ``saah_lib`` and the lab ``saah_lab`` built on
it (the library imports nothing of the lab), and inside each, layers that import only from the layers before them;
above both, the benchmarks ``bench``, which neither imports.

Read from the source (``ast``), not by importing, so a forbidden import is caught even where
it sits in a function that no test runs.
"""

import ast
import functools
import importlib.util
from pathlib import Path

import pytest

from saah_lib.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "saah_lib"
LAB = REPO_ROOT / "saah_lab"
BENCH = REPO_ROOT / "bench"
OWN_PACKAGES = ("saah_lib", "saah_lab", "bench")
#: Lowest first, the library's before the lab's. A module may import from its own layer and the layers before
#: it, never after.
LAYERS = (*(("saah_lib", name) for name in ("paths", "jsonio", "numerics", "progress", "method", "tasks", "models",
                                            "rundir", "training")),
          *(("saah_lab", name) for name in ("rundir", "training", "analysis", "report", "studies")), ("bench",))
#: Third-party packages (import names) of the lab alone (the artifact extra): no library module imports them.
#: pandas, PyYAML and psutil are installed with TRL anyway (TRL 1.16 and datasets require them).
ARTIFACT_PACKAGES = ("papermill", "jupyterlab", "jupyter", "jupyter_client", "jupyter_core", "notebook", "nbformat",
                     "nbclient", "IPython", "ipykernel", "ipywidgets", "matplotlib", "scipy", "pandas", "ray",
                     "yaml", "psutil", "jinja2", "saah_lab")
#: The only imports allowed inside functions, and why: each keeps a heavy package out of a light entry point.
FUNCTION_LEVEL_IMPORTS = {
    # papermill loads its entry point from inside its own import, so the bounded translator and engine are made
    # on first request, from papermill's modules as they stand then
    ("saah_lab/training/papermill_bounds.py", "papermill.translators"),
    ("saah_lab/training/papermill_bounds.py", "papermill.engines"),
    ("saah_lab/training/papermill_bounds.py", "saah_lab.training.notebook_params"),
    # `python -m saah_lab.training.launch --print-config` answers without loading the model and training code
    ("saah_lab/training/launch.py", "saah_lab.training.run"),
    # the launch command reads its YAML through the notebooks' bounded loader and needs neither (3 s of import)
    ("saah_lab/training/notebook_params.py", "papermill"),
    ("saah_lab/training/notebook_params.py", "IPython"),
    # reading and checking results never needs torch; only a checkpoint's tensors do
    ("saah_lab/rundir/checkpoints.py", "safetensors"),
    ("saah_lab/rundir/checkpoints.py", "torch"),
    ("saah_lab/rundir/checkpoints.py", "transformers.trainer_pt_utils"),
    # `datasets` is slow to import and unused with local data
    ("saah_lib/tasks/gsm8k.py", "datasets"),
    ("saah_lib/tasks/prompts.py", "datasets"),
}


def _modules(package=None):
    roots = (package,) if package else (PACKAGE, LAB, BENCH)
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(own: str) -> str:
    """``"saah_lib/training/trainer.py"`` -> ``"saah_lib.training.trainer"`` (a package's ``__init__`` dropped)."""
    return own.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _layer(module: str) -> int:
    """Layer index of a dotted module name (``saah_lib.method.loss`` -> the library's method)."""
    key = ("bench",) if module.split(".")[0] == "bench" else tuple(module.split(".")[:2])
    return LAYERS.index(key) if key in LAYERS else -1


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
    return path.relative_to(REPO_ROOT).as_posix()


def test_every_module_belongs_to_a_layer():
    for path in _modules():
        package, first = path.relative_to(REPO_ROOT).parts[:2]
        assert package == "bench" or (package, first.removesuffix(".py")) in LAYERS or first in ("__init__.py",
                                                                                          "__main__.py"), \
            f"{_own(path)} lies outside the layers {LAYERS}"


def test_imports_go_down_the_layers_never_up():
    upward = []
    for path in _modules():
        if path.parent in (PACKAGE, LAB):
            continue  # a package's top: the commands and lazy re-exports (PEP 562) of names from every layer
        own = _layer(_module_name(_own(path)))
        for module, _, line in _imports(path):
            if module.split(".")[0] in OWN_PACKAGES and _layer(module) > own:
                upward.append(f"{_own(path)}:{line} imports {module} ({LAYERS[_layer(module)]} is above "
                              f"{LAYERS[own]})")
    assert upward == []


def test_the_trainer_and_its_config_import_no_run_folder_or_repository_code():
    """``SAAHGRPOConfig`` and ``SAAHGRPOTrainer`` need no profiles, run folders or repository paths (the run's
    config, :mod:`saah_lib.training.config`, does)."""
    seen, todo = set(), ["saah_lib.training.grpo_config", "saah_lib.training.trainer"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        file = REPO_ROOT / module.replace(".", "/")
        path = file.with_suffix(".py") if file.with_suffix(".py").exists() else file / "__init__.py"
        parents = [module.rsplit(".", 1)[0]] if "." in module else []  # a module's packages load first
        todo += parents + [m for m, _, _ in _imports(path) if m.split(".")[0] == "saah_lib"]
    assert not seen & {"saah_lib.paths", "saah_lib.rundir.layout", "saah_lib.training.profiles",
                       "saah_lib.training.config"}, sorted(seen)


def test_neither_the_library_nor_the_lab_imports_the_benchmarks():
    found = [f"{_own(path)}:{line} imports {module}" for path in _modules(PACKAGE) + _modules(LAB)
             for module, _, line in _imports(path) if module.split(".")[0] == "bench"]
    assert found == []


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
        graph[_module_name(_own(path))] = {m for m, _, _ in _imports(path) if m.split(".")[0] in OWN_PACKAGES}
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
    import saah_lab
    import saah_lib

    for package in (saah_lib, saah_lab):
        for name in package.__all__:
            assert getattr(package, name) is not None, name


# ---------------------------------------------------------------------------
# the library and the lab: one direction, the library's dependencies only
# ---------------------------------------------------------------------------

def _package_sources() -> dict[str, str]:
    return {_own(path): path.read_text() for path in _modules(PACKAGE)}


def _dependency_names() -> set[str]:
    """The distributions of ``[project].dependencies``, names normalised as pip does."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Import name -> the installed distributions that provide it (reading every installed one takes seconds)."""
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def library_problems(sources: dict[str, str], dependencies: set[str]) -> list[str]:
    """Every import of a library module that imports the lab, a package of the lab alone or a package that the
    library's dependencies do not provide, with file and line.

    ``sources``: file path (``saah_lib/...``) -> its text; ``dependencies``: the library's distributions.
    """
    import sys

    from packaging.utils import canonicalize_name

    distributions = _distributions()
    problems = []
    for own, text in sorted(sources.items()):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                where = f"{own}:{node.lineno}"
                if top == "saah_lib":
                    continue
                if top == "saah_lab":
                    problems.append(f"{where} imports {name}, a module of the lab")
                elif top in ARTIFACT_PACKAGES:
                    problems.append(f"{where} imports {name}, a package of the artifact")
                elif top not in sys.stdlib_module_names and top != "__future__":
                    provided_by = {canonicalize_name(d) for d in distributions.get(top, ())}
                    if not provided_by & dependencies:
                        problems.append(f"{where} imports {name}, which no [project].dependencies entry provides "
                                        f"(installed from: {', '.join(sorted(provided_by)) or 'nothing'})")
    return problems


def test_the_library_imports_no_artifact_module_and_only_its_dependencies():
    assert library_problems(_package_sources(), _dependency_names()) == []


def test_the_library_check_finds_planted_imports_of_the_artifact():
    sources = _package_sources()
    dependencies = _dependency_names()
    planted = dict(sources)
    planted["saah_lib/training/trainer.py"] += ("\nimport pandas\nfrom saah_lab.analysis.frames import run_frame\n"
                                                "import saah_lab\n")
    planted["saah_lib/models/loading.py"] += "\n\ndef f():\n    import ray\n"
    found = library_problems(planted, dependencies)
    assert len(found) == 4, found
    assert any("trainer.py" in p and "pandas, a package of the artifact" in p for p in found)
    assert any("saah_lab.analysis.frames, a module of the lab" in p for p in found)
    assert any("imports saah_lab, a module of the lab" in p for p in found)
    assert any("loading.py" in p and "ray" in p for p in found)  # inside a function too
    # a library import whose distribution is missing from [project].dependencies
    assert any("peft" in p and "no [project].dependencies entry" in p
               for p in library_problems(sources, dependencies - {"peft"}))


def test_the_artifact_packages_are_in_the_artifact_extra_not_the_dependencies():
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    artifact = {Requirement(r).name.lower() for r in project["optional-dependencies"]["artifact"]}
    dependencies = {Requirement(r).name.lower() for r in project["dependencies"]}
    assert {"papermill", "jupyterlab", "ipykernel", "ipywidgets", "matplotlib", "pandas", "scipy", "ray"} <= artifact
    assert not artifact & dependencies


# Imports every library module and builds a trainer where the artifact's packages cannot be imported by saah_lib:
# a meta-path finder refuses them when the import statement runs in a module of saah_lib (TRL and datasets import
# pandas, PyYAML and psutil themselves, and may). Prints the artifact packages that third parties did import.
_BLOCKED_IMPORT_SCRIPT = r"""
import importlib, pathlib, sys
ARTIFACT_PACKAGES = tuple(sys.argv[4].split(","))

class RefuseTheArtifact:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in ARTIFACT_PACKAGES:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__", "") if frame is not None else ""
        if importer.split(".")[0] == "saah_lib":
            raise ImportError(f"{importer} imports {name}: a package of the artifact, refused in the library")
        return None

sys.meta_path.insert(0, RefuseTheArtifact())
package = pathlib.Path(sys.argv[1])
for path in sorted(package.rglob("*.py")):
    if path.name != "__main__.py":
        own = path.relative_to(package.parent).as_posix()
        importlib.import_module(own.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
from datasets import Dataset
from saah_lib import SAAHGRPOConfig, SAAHGRPOTrainer
args = SAAHGRPOConfig(output_dir=sys.argv[3], method="sa", max_steps=1, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=4, save_strategy="no", report_to="none", use_cpu=True)
trainer = SAAHGRPOTrainer(model=sys.argv[2], reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}))
print("trainer", type(trainer).__name__)
print("imported by others:", sorted(p for p in ARTIFACT_PACKAGES if p in sys.modules))
"""


@pytest.mark.slow  # a fresh process imports TRL and builds a trainer (about 15 s of CPU)
@pytest.mark.parametrize("planted", [False, True])
def test_the_library_imports_and_builds_a_trainer_with_the_artifact_refused(tiny_random_model_dir, tmp_path,
                                                                              planted):
    import subprocess
    import sys

    root = REPO_ROOT
    if planted:  # a copy of the package whose library imports scipy: the refusal must see it
        import shutil

        root = tmp_path / "repo"
        shutil.copytree(PACKAGE, root / "saah_lib", ignore=shutil.ignore_patterns("__pycache__"))
        sampler = root / "saah_lib" / "training" / "sampler.py"
        sampler.write_text(sampler.read_text() + "\nimport scipy.stats\n")
    done = subprocess.run([sys.executable, "-c", _BLOCKED_IMPORT_SCRIPT, str(root / "saah_lib"),
                           str(tiny_random_model_dir), str(tmp_path / "out"), ",".join(ARTIFACT_PACKAGES)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                          env={"PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    if planted:
        assert done.returncode != 0 and "saah_lib.training.sampler imports scipy" in done.stderr, done.stderr[-3000:]
    else:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "trainer SAAHGRPOTrainer" in done.stdout


# ---------------------------------------------------------------------------
# module docstrings: short enough to stay true (what the module is and why; the figures live in results/)
# ---------------------------------------------------------------------------

#: The most lines a module docstring may have; longer substance belongs in docs/ or a function's docstring.
MAX_MODULE_DOCSTRING_LINES = 15


def docstring_problems(sources: dict[str, str]) -> list[str]:
    """Each file of ``sources`` (path -> text) without a module docstring or with one over the limit."""
    problems = []
    for own, text in sorted(sources.items()):
        docstring = ast.get_docstring(ast.parse(text), clean=True)
        if not docstring:
            problems.append(f"{own}: no module docstring")
        elif len(docstring.splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            problems.append(f"{own}: {len(docstring.splitlines())} lines")
    return problems


def _docstring_sources() -> dict[str, str]:
    paths = _modules() + sorted((REPO_ROOT / "tools").glob("*.py"))
    return {path.relative_to(REPO_ROOT).as_posix(): path.read_text() for path in paths}


def test_every_module_docstring_is_at_most_15_lines():
    problems = docstring_problems(_docstring_sources())
    assert problems == [], (f"module docstrings missing or over {MAX_MODULE_DOCSTRING_LINES} lines:\n  "
                            + "\n  ".join(problems))


def test_the_docstring_check_finds_long_and_missing_docstrings():
    planted = {"short.py": '"""One line."""\n',
               "limit.py": '"""' + "\n".join(["line"] * MAX_MODULE_DOCSTRING_LINES) + '\n"""\nx = 1\n',
               "long.py": '"""' + "\n".join(["line"] * (MAX_MODULE_DOCSTRING_LINES + 1)) + '\n"""\n',
               "none.py": "x = 1\n"}
    assert docstring_problems(planted) == ["long.py: 16 lines", "none.py: no module docstring"]


# ---------------------------------------------------------------------------
# the library's size: what the card's imports load (tools/library_lines.py), the compiled engine left out
# ---------------------------------------------------------------------------

_spec = importlib.util.spec_from_file_location("library_lines", REPO_ROOT / "tools" / "library_lines.py")
library_lines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(library_lines)

#: A ratchet under the issue's target of 3,000 lines: lower it as the library shrinks, never raise it.
LIBRARY_LINE_CEILING = 3000
#: The opt-in compiled rollout engine: loaded only by a trainer that mixes in CompiledRolloutMixin.
ENGINE_MODULES = ("saah_lib.models.rollout", "saah_lib.models.rollout_trainer", "saah_lib.models.attention",
                  "saah_lib.models.sampling", "saah_lib.models.compile_health")


def library_size_problems(package_root) -> list[str]:
    modules = library_lines.library_modules(package_root)
    problems = [f"the card's imports load the engine module {name}" for name in ENGINE_MODULES if name in modules]
    total = sum(modules.values())
    if total > LIBRARY_LINE_CEILING:
        problems.append(f"the library is {total} lines, over the ceiling of {LIBRARY_LINE_CEILING}")
    return problems


@pytest.mark.slow  # a fresh process imports TRL (seconds)
def test_the_library_is_under_its_ceiling_and_loads_no_engine_module():
    assert library_size_problems(REPO_ROOT) == []


def test_the_size_check_finds_a_planted_engine_import(monkeypatch):
    # the check over what a fresh process loaded (the test above runs that process): here it is told the card's
    # imports also loaded the engine, as they would if trainer.py imported it
    planted = {"saah_lib.training.trainer": 230, "saah_lib.models.rollout_trainer": LIBRARY_LINE_CEILING}
    monkeypatch.setattr(library_lines, "library_modules", lambda root: planted)
    problems = library_size_problems(REPO_ROOT)
    assert "the card's imports load the engine module saah_lib.models.rollout_trainer" in problems
    assert any(p.startswith("the library is ") for p in problems)  # the engine's lines count too
