"""The notebooks' parameters: what papermill injected, checked against what the notebook declares.

papermill only warns about a parameter that a notebook does not declare, and hands every ``-p`` value that does
not read as a number, a boolean or None to the notebook as a string. Each notebook's first code cell therefore
calls :func:`read_parameters`, which makes an unknown name an error naming the declared ones, parses a string
given for a ``dict`` or ``list`` parameter as YAML (JSON is YAML), and checks every value against the type its
line declares (``name: type = default  # help``), read with papermill's own parser (``--help-notebook``'s).

Values are bounded (:func:`check_sizes`, :func:`safe_yaml`) against huge values and YAML bombs: here, in
``launch --config`` and in papermill's own translator (:mod:`saah_lab.training.papermill_bounds`).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import yaml

from saah_lib.paths import NOTEBOOKS

#: the first line of the cell papermill injects after the parameters cell (its translator's comment)
INJECTED_CELL_HEADER = "# Parameters"
_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "dict": (dict,), "list": (list,)}
#: The most characters one parameter value may hold written out (a dict of overrides is a few hundred).
MAX_VALUE_CHARS = 100_000


class ParameterError(ValueError):
    """A notebook parameter that is unknown, unparsable, too large or of the wrong type."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the second without a word) and
    reading ``1e-5`` as a number, as JSON, YAML 1.2 and TRL's parser do (YAML 1.1 reads an exponent without a dot
    or a sign as a string; a quoted ``"1e-5"`` stays one)."""

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        lines = {}
        for key, _ in node.value:  # as written: a merge (<<) may repeat keys on purpose, and is left out
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if (key.tag, key.value) in lines:
                    raise yaml.YAMLError(f"the key {key.value!r} is given twice (lines {lines[key.tag, key.value]} "
                                         f"and {line}); give it once")
                lines[key.tag, key.value] = line
        return node


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def written_chars(value) -> int:
    """The characters of ``value`` written out as JSON, a shared part at every appearance as papermill writes it,
    counted lazily and only to just past :data:`MAX_VALUE_CHARS`: a YAML bomb stops the count, not the machine.
    ValueError for a value that contains itself, TypeError for a key JSON cannot write."""
    chars = 0
    for chunk in json.JSONEncoder(ensure_ascii=False, default=str).iterencode(value):
        chars += len(chunk)
        if chars > MAX_VALUE_CHARS:
            break
    return chars


def safe_yaml(name: str, text: str):
    """``text`` parsed as YAML by PyYAML's safe loader, within :data:`MAX_VALUE_CHARS` characters as written and
    once its aliases are written out; yaml.YAMLError otherwise (ParameterError naming ``name`` for a long text).
    PyYAML builds an alias as a shared object, so building a bomb is quick: only writing it out is not."""
    check_sizes({name: text})
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader)
        too_long = written_chars(value) > MAX_VALUE_CHARS
    except RecursionError:
        raise yaml.YAMLError("it is nested too deeply") from None
    except (TypeError, ValueError) as err:
        raise yaml.YAMLError(str(err)) from None
    if too_long:
        raise yaml.YAMLError(f"its aliases expand to more than {MAX_VALUE_CHARS:,} characters")
    return value


def check_sizes(parameters: dict) -> None:
    """Every parameter value within :data:`MAX_VALUE_CHARS` characters written out; else a ParameterError naming it
    (papermill's own translator calls this too: :mod:`saah_lab.training.papermill_bounds`)."""
    for name, value in parameters.items():
        try:
            chars = written_chars(value)
        except (RecursionError, TypeError, ValueError) as error:
            raise ParameterError(f"notebook parameter {name!r} cannot be written out ({error})") from None
        if chars > MAX_VALUE_CHARS:
            raise ParameterError(f"notebook parameter {name!r} holds more than {MAX_VALUE_CHARS:,} characters "
                                 f"(at least {chars:,}); notebook parameters are settings, not data: pass a file's "
                                 "path instead")


def declared_parameters(notebook: str | Path) -> dict[str, dict]:
    """``{name: {"inferred_type_name", "default", "help"}}`` of a notebook's parameters cell (a name
    like ``02_train`` means ``notebooks/02_train.ipynb``)."""
    path = Path(notebook)
    if not path.suffix:
        path = NOTEBOOKS / f"{notebook}.ipynb"
    import papermill  # here: the launch command reads YAML through this module and needs no papermill (3 s)

    return papermill.inspect_notebook(str(path))


def injected_names(history: list[str]) -> list[str]:
    """Names assigned by the newest papermill-injected cell in a kernel's input history (``In``); [] if none."""
    for source in reversed(history):
        if source.lstrip().startswith(INJECTED_CELL_HEADER):
            tree = ast.parse(source)
            return [t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(t, ast.Name)]
    return []


def checked_value(name: str, value, type_name: str):
    """``value`` checked against the type its parameter declares (``int``, ``Optional[int]``, ``list[float]``, ...);
    a ``dict`` or ``list`` given as text (``-p``) is parsed as YAML first. Returns the value; else a ParameterError."""
    optional = type_name.startswith("Optional[") and type_name.endswith("]")
    kind = (type_name[len("Optional["):-1] if optional else type_name).split("[")[0].strip()
    if kind not in _TYPES:
        raise ParameterError(f"notebook parameter {name!r} declares the type {type_name!r}, which is not one of "
                             f"{', '.join(_TYPES)} (optionally Optional[...])")
    if kind in ("dict", "list") and isinstance(value, str):
        example = '\'{"n_eval": 100}\'' if kind == "dict" else "'[0.1, 0.5]'"
        try:
            parsed = safe_yaml(name, value)
        except yaml.YAMLError as err:
            reason = getattr(err, "problem", None) or str(err).splitlines()[0]  # one line, not YAML's drawing
            raise ParameterError(f"notebook parameter {name!r}: {value!r} is not JSON or YAML ({reason}); "
                                 f"e.g. -p {name} {example}") from err
        if not isinstance(parsed, _TYPES[kind]):
            raise ParameterError(f"notebook parameter {name!r} must be a {kind}, e.g. -p {name} {example}; "
                                 f"got {value!r}")
        value = parsed
    if (value is not None or not optional) and (isinstance(value, bool) and kind != "bool"
                                                or not isinstance(value, _TYPES[kind])):
        raise ParameterError(f"notebook parameter {name!r} must be {type_name}, got {value!r} "
                             f"({type(value).__name__})")
    return value


def kernel_history() -> list[str]:
    """The cells the running IPython kernel has executed, from its history manager: unlike ``In`` in the
    notebook's namespace, no parameter can replace it (``-p In x`` reassigns the name, not the history)."""
    from IPython import get_ipython  # here, as papermill above

    shell = get_ipython()
    return list(shell.history_manager.input_hist_raw) if shell is not None else []


def read_parameters(notebook: str | Path, namespace: dict, history: list[str] | None = None) -> dict:
    """A notebook's parameters in ``namespace`` (its ``globals()``), checked (:func:`checked_value`, parsed values
    written back) and returned by name. Every name the papermill-injected cell of ``history`` (default: the
    kernel's) assigns must be declared; the kernel's own names (``In``, ``Out``, ...) are no parameters."""
    declared = declared_parameters(notebook)
    history = kernel_history() if history is None else history
    unknown = [n for n in injected_names(history) if n not in declared]
    if unknown:
        raise ParameterError(f"unknown notebook parameter(s) {', '.join(map(repr, unknown))}: {Path(notebook).stem} "
                             f"declares {', '.join(declared)} (papermill --help-notebook lists them)")
    check_sizes({name: namespace[name] for name in declared})
    values = {name: checked_value(name, namespace[name], info["inferred_type_name"]) for name, info in declared.items()}
    namespace.update(values)  # a dict or list given as text, parsed
    return values


def config_fields(parameters: dict, overrides: dict, own: tuple[str, ...]) -> dict:
    """make_config's arguments in a notebook: its parameters named in ``own`` (None: the profile's), and
    ``overrides`` as given (``null`` there is None). A field has one place (no precedence rule to remember):
    ``overrides`` naming a field with its own parameter is an error naming the parameter to use."""
    both = sorted(set(overrides) & set(own))
    if both:
        raise ParameterError(f"overrides sets {', '.join(map(repr, both))}, which the notebook takes as its own "
                             f"parameter(s): use -p {both[0]} ... instead")
    return {**{name: parameters[name] for name in own}, "overrides": overrides}
