"""saah_lib's two layers: the library a user installs, and the artifact (the paper's lab) built on it.

The **library** is the method and what training with it needs: the loss and token weights (``method/``), the
TRL trainer subclass, its config, callbacks and sampler (``training/``), GSM8K and the tasks (``tasks/``), model
names, loading, greedy evaluation and the compiled rollout engine (``models/``), and the few helpers they stand on.
:data:`LIBRARY` names it, module by module; **everything else in saah_lib is the artifact**: the studies and
their engine, analysis, report, the run folder's reading and checks, one whole run, the notebooks' parameters.

One direction: the artifact imports the library, never the reverse. A library module imports only library
modules and, of the third-party packages, only the library's dependencies (``[project].dependencies`` of
pyproject.toml), never one of :data:`ARTIFACT_PACKAGES`. tests/test_layout.py checks both rules on every import
statement (``ast``) and imports the library in a process where those packages cannot be imported;
tests/test_install_alone.py installs the library alone into a fresh venv and trains with it. Why a declaration
rather than two top-level packages, and why a few modules fall on the side they do: docs/library.md,
"Which modules are the library".
"""

from __future__ import annotations

#: The library's modules. A name stands for that module and, for a package, every module under it.
LIBRARY = (
    "saah_lib.__init__",  # lazy re-exports (PEP 562): importing saah_lib imports nothing of either layer
    "saah_lib.__main__",  # `python -m saah_lib` lists the commands
    "saah_lib.library",
    "saah_lib.paths",
    "saah_lib.jsonio",
    "saah_lib.numerics",
    "saah_lib.progress",
    "saah_lib.method",
    "saah_lib.tasks",
    "saah_lib.models",
    "saah_lib.rundir.__init__",
    "saah_lib.rundir.layout",  # where a run's files go: the config's run_dir, the callbacks' log
    "saah_lib.rundir.folder",  # the callbacks append the run's log lines
    "saah_lib.training.__init__",
    "saah_lib.training.config",
    "saah_lib.training.profiles",  # the light half of the config (config re-exports it)
    "saah_lib.training.distributed",
    "saah_lib.training.trainer",
    "saah_lib.training.flat_groups",  # the paper's flat-group rule, an opt-in layer of the trainer
    "saah_lib.training.sampler",
    "saah_lib.training.callbacks",
)

#: Third-party packages (import names) of the artifact alone: no library module imports them. pandas, PyYAML and
#: psutil are installed with TRL anyway (TRL 1.16 and datasets require them), but the library never imports them.
ARTIFACT_PACKAGES = ("papermill", "jupyterlab", "jupyter", "jupyter_client", "jupyter_core", "notebook", "nbformat",
                     "nbclient", "IPython", "ipykernel", "ipywidgets", "matplotlib", "scipy", "pandas", "ray",
                     "yaml", "psutil")


def module_name(relative_path: str) -> str:
    """``"training/trainer.py"`` (relative to the package folder) -> ``"saah_lib.training.trainer"``;
    a package's ``__init__.py`` keeps its ``.__init__`` so that it can be named apart from its package."""
    return "saah_lib." + relative_path.removesuffix(".py").replace("/", ".")


def is_library(module: str) -> bool:
    """Whether a module of saah_lib (dotted, as :func:`module_name` gives or an import names it) is the library's.

    An import of a package (``import saah_lib.models``) names its ``__init__``.
    """
    names = {module, module + ".__init__"}
    return any(name == entry or name.startswith(entry + ".") for name in names for entry in LIBRARY)
