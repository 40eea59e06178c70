"""papermill's command line, bounded: parameters too large for a notebook are refused before papermill writes them.

papermill parses ``-y``/``-f`` YAML and ``-p`` values itself and writes every one into the notebook's injected cell
before any notebook code runs: a YAML bomb would hang there, a huge value would be written out.  Its one hook that
runs before that is the loading of its engines' entry points, as it starts: ``pyproject.toml`` names
``BoundedParametersEngine`` here (papermill's default engine under the name ``saah_lib``), and making it registers
:func:`bounded_translator`'s translator for Python kernels, which checks the parameters with the notebooks' own
bound (:func:`saah_lab.training.notebook_params.check_sizes`) before translating them.

Both are made on first request (PEP 562 ``__getattr__``), not at import: papermill loads entry points from inside
its own import, which may be running on behalf of this package (``notebook_params`` imports papermill), and the
papermill classes needed exist by then.
"""

from __future__ import annotations

import functools


def __getattr__(name: str):
    if name == "BoundedParametersEngine":
        return bounded_engine()
    if name == "BoundedPythonTranslator":
        return bounded_translator()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def bounded_translator() -> type:
    """papermill's Python translator, refusing a value beyond the notebooks' size bound (a YAML bomb's shared parts
    counted at every appearance, as papermill would write them) before writing any; registered for Python."""
    from papermill.translators import PythonTranslator, papermill_translators

    class BoundedPythonTranslator(PythonTranslator):
        @classmethod
        def codify(cls, parameters, comment="Parameters"):
            from saah_lab.training.notebook_params import check_sizes  # it imports papermill: not at its start

            check_sizes(parameters)
            return super().codify(parameters, comment)

    papermill_translators.register("python", BoundedPythonTranslator)
    return BoundedPythonTranslator


@functools.cache
def bounded_engine() -> type:
    """papermill's default engine, registered under the name ``saah_lib`` so that papermill makes the bounded
    translator as it starts."""
    from papermill.engines import NBClientEngine

    bounded_translator()

    class BoundedParametersEngine(NBClientEngine):
        pass

    return BoundedParametersEngine
