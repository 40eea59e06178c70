"""Notebook parameters: unknown names are errors, text for dict/list parameters is parsed, types are checked."""

import subprocess
import sys
import time

import pytest
from papermill.translators import PythonTranslator

from saah_lab.studies.plans import ablation_plan
from saah_lab.training.notebook_params import (
    ParameterError,
    checked_value,
    config_fields,
    declared_parameters,
    injected_names,
    read_parameters,
    safe_yaml,
)
from saah_lab.training.papermill_bounds import bounded_translator
from saah_lib.paths import NOTEBOOKS

# what papermill's kernel history holds: the parameters cell, then the cell papermill injects
PARAMETERS_CELL = 'from typing import Optional\n\nseed: int = 0  # s\noverrides: dict = {}  # o\n'


def history(injected: str) -> list[str]:
    return ["", PARAMETERS_CELL, injected, "read_parameters(...)"]


def test_injected_names_come_from_the_newest_injected_cell():
    history = ["x = 1", '# Parameters\nseed = 1\n', "y = 2", '# Parameters\nalpha = 0.5\nbogus = "a"\n']
    assert injected_names(history) == ["alpha", "bogus"]
    assert injected_names(["x = 1"]) == []  # JupyterLab without papermill: nothing injected


def test_an_unknown_parameter_is_an_error_naming_the_known_ones():
    ns = {k: None for k in declared_parameters("02_train")} | {"sede": 1}  # a typo of seed
    with pytest.raises(ParameterError, match=r"'sede'.*02_train declares profile, method, alpha"):
        read_parameters("02_train", ns, history('# Parameters\nsede = 1\n'))


def test_kernel_names_are_no_parameters_and_cannot_switch_the_check_off():
    # -p In x replaced the kernel's input history in the namespace, and with it the unknown-name check
    ns = {k: None for k in declared_parameters("02_train")} | {"In": "x", "bogus": 1}
    with pytest.raises(ParameterError, match=r"'In', 'bogus'"):
        read_parameters("02_train", ns, history('# Parameters\nIn = "x"\nbogus = 1\n'))


def test_overrides_text_is_parsed_as_json_or_yaml_in_place():
    declared = declared_parameters("02_train")
    ns = {name: None for name in declared} | {
        "profile": "tiny", "method": "sa", "alpha": 0, "seed": 0, "results_dir": "r", "generation_backend": "auto",
        "vllm_mode": "colocate", "report_to": "none", "progress": True, "overrides": '{"n_eval": 100}'}
    values = read_parameters("02_train", ns, ['# Parameters\noverrides = "{\\"n_eval\\": 100}"\n'])
    assert ns["overrides"] == values["overrides"] == {"n_eval": 100}
    assert checked_value("overrides", "{n_eval: 100, dataset: gsm8k}", "dict") == {"n_eval": 100,
                                                                                      "dataset": "gsm8k"}
    assert checked_value("alphas", "[0.1, 0.5]", "list") == [0.1, 0.5]


@pytest.mark.parametrize("text,kind,message", [
    ("{n_eval: 100", "dict", "not JSON or YAML"),
    ("n_eval", "dict", "must be a dict"),
    ("0.5", "list", "must be a list"),
])
def test_unreadable_text_names_the_parameter_and_shows_an_example(text, kind, message):
    with pytest.raises(ParameterError, match=f"'p'.*{message}.*-p p"):
        checked_value("p", text, kind)


@pytest.mark.parametrize("value,type_name,ok", [
    (0, "float", True), (0.5, "float", True), (True, "float", False), ("0.5", "float", False),
    (None, "Optional[int]", True), (None, "int", False), (3, "Optional[int]", True), (1.0, "int", False),
    (True, "bool", True), ("x", "str", True), ([1], "list", True), ({}, "dict", True),
])
def test_types_are_checked(value, type_name, ok):
    if ok:
        checked_value("p", value, type_name)
    else:
        with pytest.raises(ParameterError, match=f"'p' must be {type_name.replace('[', '.').replace(']', '.')}"):
            checked_value("p", value, type_name)


def test_a_field_has_one_place():
    assert config_fields({"seed": 1, "alpha": 0.5}, {"beta": 0.1}, ("seed", "alpha")) == \
        {"seed": 1, "alpha": 0.5, "overrides": {"beta": 0.1}}
    with pytest.raises(ParameterError, match="'seed'.*use -p seed"):
        config_fields({"seed": 1}, {"seed": 2}, ("seed",))


def test_null_in_overrides_is_none_and_a_parameter_left_at_none_is_the_profiles():
    from saah_lib.training.config import make_config

    fields = config_fields({"profile": "qwen2.5-1.5b", "seed": None}, safe_yaml("overrides", "{entropy_top_k: null}"),
                           ("profile", "seed"))
    cfg = make_config(**fields)
    assert (cfg.trainer.entropy_top_k, cfg.trainer.seed) == (None, 123)  # the exact entropy; the profile's seed


def test_yaml_reads_1e_minus_5_as_a_number_as_json_and_trl_do():
    assert checked_value("overrides", '{"learning_rate": 1e-5, "b": 2E3, "c": -1.5e+2, "d": "1e-5"}', "dict") == \
        {"learning_rate": 1e-5, "b": 2000.0, "c": -150.0, "d": "1e-5"}


def test_a_key_given_twice_is_an_error_naming_it():
    with pytest.raises(ParameterError, match="the key 'n_eval' is given twice .lines 1 and 1."):
        checked_value("overrides", '{"n_eval": 100, "n_eval": 50}', "dict")
    assert safe_yaml("x", "a: &a {k: 1, j: 2}\nb: {<<: *a, k: 3}\n")["b"] == {"k": 3, "j": 2}  # a merge overrides


def test_the_ablation_refuses_overrides_of_what_it_sets(tmp_path):
    with pytest.raises(ValueError, match="'seed'.*sets itself"):
        ablation_plan([0.1], seed=0, results_dir=str(tmp_path), overrides={"seed": 3})
    assert not any(tmp_path.iterdir())


# ---- bounded values (issue 39, item 13)

# nine levels of nine aliases: 9^9 "lol"s once expanded, from a few hundred characters
BILLION_LAUGHS = 'l0: &l0 "lol"\n' + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))


def test_a_yaml_bomb_is_refused_before_it_is_built():
    start = time.perf_counter()
    with pytest.raises(ParameterError, match=r"'overrides'.*aliases expand to more than 100,000 characters"):
        checked_value("overrides", BILLION_LAUGHS, "dict")
    assert time.perf_counter() - start < 2


def test_many_aliases_of_a_small_value_are_fine_and_a_value_inside_itself_is_refused():
    text = "{a: &x 1, b: [" + ", ".join(["*x"] * 1000) + "]}"
    assert checked_value("overrides", text, "dict")["b"] == [1] * 1000
    with pytest.raises(ParameterError, match=r"'overrides'.*Circular reference"):
        checked_value("overrides", "&a {x: *a}", "dict")


def test_a_50_mb_value_is_refused_naming_the_parameter():
    ns = {k: None for k in declared_parameters("02_train")} | {"run_id": "x" * 50_000_000}
    start = time.perf_counter()
    with pytest.raises(ParameterError, match=r"'run_id' holds more than 100,000 characters"):
        read_parameters("02_train", ns, history('# Parameters\nrun_id = "xxx"\n'))
    assert time.perf_counter() - start < 2


# papermill's own command line: its -y/-f YAML and -p values are bounded before it writes a notebook

def _papermill(tmp_path, *arguments):
    out = tmp_path / "out.ipynb"
    command = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "02_train.ipynb"), str(out), *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path), out


def test_papermill_starts_with_the_bounded_translator():
    code = ("import papermill.translators as t; import papermill; "
            "print(t.papermill_translators.find_translator('python3', 'python').__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == bounded_translator().__name__, done.stderr


@pytest.mark.parametrize("first", ["saah_lab.training.notebook_params", "saah_lab.training.papermill_bounds",
                                   "papermill"])
def test_importing_either_module_before_papermill_starts_papermill_bounded(first):
    # papermill loads its entry points inside its own import, which notebook_params triggers (as a notebook's
    # first cell does): the entry point must resolve while that import is under way
    code = (f"import {first}; import papermill.translators as t; "
            "print(t.papermill_translators.find_translator('python3', 'python').__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "BoundedPythonTranslator", done.stderr


def test_the_bounded_translator_writes_what_papermills_writes():
    parameters = {"method": "sa", "alpha": 0.5, "overrides": {"n_eval": 100, "tags": ["a", None, True]}}
    assert bounded_translator().codify(parameters) == PythonTranslator.codify(parameters)


@pytest.mark.slow
def test_papermill_refuses_a_yaml_bomb_before_writing_the_notebook(tmp_path):
    (tmp_path / "bomb.yaml").write_text(BILLION_LAUGHS + "overrides: {x: *l9}\n")
    start = time.perf_counter()
    done, out = _papermill(tmp_path, "-f", "bomb.yaml")
    assert done.returncode != 0 and "holds more than 100,000 characters" in done.stderr
    assert not out.exists() and time.perf_counter() - start < 60


@pytest.mark.slow
def test_papermill_refuses_an_oversized_value_before_writing_the_notebook(tmp_path):
    done, out = _papermill(tmp_path, "-p", "run_id", "x" * 120_000)  # one argument: under the kernel's 128 KiB
    assert done.returncode != 0 and "notebook parameter 'run_id' holds more than 100,000 characters" in done.stderr
    assert not out.exists()
