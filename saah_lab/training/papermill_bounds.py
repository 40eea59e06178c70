"""papermill's command line, bounded: parameters too large for a notebook are refused before papermill writes them.

papermill parses ``-y``/``-f`` YAML and ``-p`` values itself and writes every one into the notebook's injected cell
before any notebook code runs (a YAML bomb would hang there). Its one hook before that is loading its engines' entry
points as it starts: ``pyproject.toml`` names ``BoundedParametersEngine`` here (papermill's default engine), whose
making registers a Python translator that checks the parameters first
(:func:`saah_lab.training.notebook_params.check_sizes`). Both are made on first request (PEP 562), not at import:
papermill loads entry points from inside its own import, which may be running on behalf of this package.
"""

from __future__ import annotations

import functools


def __getattr__(name: str):
    if name in ("BoundedParametersEngine", "BoundedPythonTranslator"):
        return {"BoundedParametersEngine": bounded_engine, "BoundedPythonTranslator": bounded_translator}[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def bounded_translator() -> type:
    """papermill's Python translator, refusing a value beyond the notebooks' bound before writing any."""
    from papermill.translators import PythonTranslator, papermill_translators

    from saah_lab.training.notebook_params import check_sizes

    class BoundedPythonTranslator(PythonTranslator):
        @classmethod
        def codify(cls, parameters, comment="Parameters"):
            check_sizes(parameters)
            return super().codify(parameters, comment)

    papermill_translators.register("python", BoundedPythonTranslator)
    return BoundedPythonTranslator


@functools.cache
def bounded_engine() -> type:
    """papermill's default engine, under the name ``saah_lib``: making it registers the bounded translator."""
    from papermill.engines import NBClientEngine

    bounded_translator()
    return type("BoundedParametersEngine", (NBClientEngine,), {})
