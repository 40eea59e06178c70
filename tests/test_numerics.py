"""The pinned CPU numerics: what is set, when, and what a result records (saah_lib.numerics)."""

import json
import subprocess
import sys

import pytest
import torch

from saah_lib.numerics import (
    MODE_VARIABLE,
    PINNED_CAPABILITY,
    PINNED_SETTINGS,
    RECORDED_VARIABLES,
    SET_BY_PIN_VARIABLE,
    CPUNumericsWarning,
    apply_cpu_numerics,
    cpu_description,
    cpu_numerics_record,
    numerics_mode,
    pin_obstacle,
    summary,
)
from saah_lib.numerics.__main__ import pin_kernelspec
from saah_lib.paths import REPO_ROOT

# Abridged /proc/cpuinfo of two machines (the first processor of each).
X86_AVX512 = """processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 9B14
flags		: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl

processor	: 1
model name	: AMD EPYC 9B14
"""
X86_OLD = ("processor	: 0\nvendor_id	: GenuineIntel\nmodel name	: Intel(R) Xeon(R) CPU E5-2670\n"
           "flags		: sse sse2 avx\n")
ARM = "processor	: 0\nBogoMIPS	: 50.00\nFeatures	: fp asimd sve\nCPU part	: 0xd40\n"
ON_AVX2 = cpu_description(X86_AVX512, "x86_64")
CPU_HERE = cpu_description()
needs_avx2 = pytest.mark.skipif(pin_obstacle(CPU_HERE) is not None, reason=f"{pin_obstacle(CPU_HERE)}")


def test_the_mode_is_pinned_unless_asked_native_and_anything_else_is_an_error():
    assert numerics_mode({}) == "pinned"
    assert numerics_mode({MODE_VARIABLE: " Native "}) == "native"
    with pytest.raises(ValueError, match=f"{MODE_VARIABLE}='fast'"):
        numerics_mode({MODE_VARIABLE: "fast"})


def test_the_cpu_is_described_from_cpuinfo():
    assert ON_AVX2 == {"cpu_model": "AMD EPYC 9B14", "cpu_vendor": "AuthenticAMD", "machine": "x86_64",
                       "cpu_flags": ["avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"]}
    assert cpu_description(X86_OLD, "x86_64")["cpu_flags"] == []
    arm = cpu_description(ARM, "aarch64")
    assert arm["machine"] == "aarch64" and arm["cpu_model"] == "0xd40"


def test_the_pin_needs_an_x86_64_cpu_with_avx2_and_fma():
    assert pin_obstacle(ON_AVX2) is None
    assert "lacks avx2, fma" in pin_obstacle(cpu_description(X86_OLD, "x86_64"))
    assert "aarch64, not x86-64" in pin_obstacle(cpu_description(ARM, "aarch64"))
    assert "cannot read the CPU's flags" in pin_obstacle(cpu_description("", "x86_64"))


def test_pinned_mode_sets_every_pinned_setting_and_names_them():
    env = {}
    state = apply_cpu_numerics(env, ON_AVX2)
    assert {k: env[k] for k in PINNED_SETTINGS} == PINNED_SETTINGS == state["set"]
    assert env[SET_BY_PIN_VARIABLE] == ",".join(sorted(PINNED_SETTINGS))
    again = dict(env)
    assert apply_cpu_numerics(again, ON_AVX2)["set"] == {} and again == env  # applying twice changes nothing


def test_a_conflicting_user_setting_is_replaced_with_a_warning_that_names_it():
    env = {"ATEN_CPU_CAPABILITY": "avx512"}
    with pytest.warns(CPUNumericsWarning, match="ATEN_CPU_CAPABILITY='avx512' replaced"):
        state = apply_cpu_numerics(env, ON_AVX2)
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and state["replaced"] == {"ATEN_CPU_CAPABILITY": "avx512"}


def test_native_mode_keeps_the_users_settings_and_drops_those_a_pinned_parent_set():
    own = {MODE_VARIABLE: "native", "ATEN_CPU_CAPABILITY": "avx512"}
    apply_cpu_numerics(own, ON_AVX2)
    assert own == {MODE_VARIABLE: "native", "ATEN_CPU_CAPABILITY": "avx512"}
    inherited = {}
    apply_cpu_numerics(inherited, ON_AVX2)  # the parent, pinned
    inherited[MODE_VARIABLE] = "native"
    assert apply_cpu_numerics(inherited, ON_AVX2)["unset"] == sorted(PINNED_SETTINGS)
    assert inherited == {MODE_VARIABLE: "native"}


@pytest.mark.parametrize("cpuinfo, machine", [(ARM, "aarch64"), (X86_OLD, "x86_64")])
def test_where_the_pin_cannot_hold_nothing_is_set_and_a_warning_says_why(cpuinfo, machine):
    env = {}
    with pytest.warns(CPUNumericsWarning, match="CPU numerics not pinned"):
        state = apply_cpu_numerics(env, cpu_description(cpuinfo, machine))
    assert env == {} and state["obstacle"]


@needs_avx2
def test_this_process_runs_the_pinned_kernels_and_records_them():
    # conftest imports saah_lib before torch, as every entry point of the package does
    assert torch.backends.cpu.get_cpu_capability() == PINNED_CAPABILITY
    record = cpu_numerics_record()
    assert record["mode"] == "pinned" and record["pin_holds"] is True
    assert record["capability"] == PINNED_CAPABILITY and record["torch_threads"] == torch.get_num_threads()
    assert record["cpu_model"] == CPU_HERE["cpu_model"] and record["pinned_settings"] == PINNED_SETTINGS
    assert summary(record).startswith("pinned (ATEN_CPU_CAPABILITY=avx2")


def test_a_native_record_says_so_and_claims_nothing_about_the_pin():
    record = cpu_numerics_record({MODE_VARIABLE: "native"})
    assert record["mode"] == "native" and record["pin_holds"] is None and record["pinned_settings"] is None
    assert summary(record).startswith("native; torch CPU capability")
    assert summary(None) == "not recorded"


def _capability_of_a_fresh_process(env: dict, code: str = "import saah_lab.studies, torch") -> str:
    out = subprocess.run([sys.executable, "-c", f"{code}; print(torch.backends.cpu.get_cpu_capability())"],
                         env=env, capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return out.stdout.split()[-1]


@pytest.mark.slow
@needs_avx2
def test_importing_the_studies_pins_a_fresh_process_and_native_leaves_it_alone():
    import os

    env = {k: v for k, v in os.environ.items() if k not in PINNED_SETTINGS and k != SET_BY_PIN_VARIABLE}
    env["PYTHONPATH"] = str(REPO_ROOT)
    assert _capability_of_a_fresh_process(env) == PINNED_CAPABILITY
    inherited = {**env, **PINNED_SETTINGS, SET_BY_PIN_VARIABLE: ",".join(PINNED_SETTINGS), MODE_VARIABLE: "native"}
    native = _capability_of_a_fresh_process(inherited)
    assert native == _capability_of_a_fresh_process({**env, MODE_VARIABLE: "native"}, code="import torch")


def test_the_kernelspec_is_rewritten_to_start_through_the_pin(tmp_path):
    spec = {"argv": ["/venv/bin/python", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f",
                     "{connection_file}"], "display_name": "Python 3 (saah)", "language": "python"}
    (tmp_path / "kernel.json").write_text(json.dumps(spec))
    pin_kernelspec(tmp_path)
    pinned = json.loads((tmp_path / "kernel.json").read_text())
    assert pinned["argv"] == ["/venv/bin/python", "-Xfrozen_modules=off", "-m", "saah_lib.numerics", "kernel", "-f",
                              "{connection_file}"]
    assert {k: v for k, v in pinned.items() if k != "argv"} == {k: v for k, v in spec.items() if k != "argv"}
    pin_kernelspec(tmp_path)
    assert json.loads((tmp_path / "kernel.json").read_text()) == pinned  # idempotent
    (tmp_path / "kernel.json").write_text(json.dumps({"argv": ["R", "--slave"]}))
    with pytest.raises(ValueError, match="kernel.json: argv .* does not start '-m ipykernel_launcher'"):
        pin_kernelspec(tmp_path)
    assert json.loads((tmp_path / "kernel.json").read_text()) == {"argv": ["R", "--slave"]}  # untouched


@pytest.mark.slow
def test_importing_saah_lib_changes_nothing_and_prints_nothing():
    import os

    # none of the variables a record lists (make test sets OMP_NUM_THREADS=1), as in a user's plain shell
    env = {k: v for k, v in os.environ.items() if k not in RECORDED_VARIABLES and k != SET_BY_PIN_VARIABLE}
    env["PYTHONPATH"] = str(REPO_ROOT)
    code = ("import torch, saah_lib, os; from saah_lib import SAAHGRPOConfig, SAAHGRPOTrainer; "
            "print(sorted(k for k in os.environ if k in ('ATEN_CPU_CAPABILITY', 'MKL_CBWR')))")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], env=env, capture_output=True, text=True,
                          cwd=REPO_ROOT, check=True)
    assert done.stdout.strip() == "[]"
    assert "CPUNumericsWarning" not in done.stderr and "saah_lib" not in done.stderr
    done = subprocess.run([sys.executable, "-c", "import torch, saah_lib"], env=env, capture_output=True, text=True,
                          cwd=REPO_ROOT, check=True)
    assert (done.stdout, done.stderr) == ("", "")
    # and what such a process records says it was not pinned
    code = ("import torch, json; from saah_lib.numerics import cpu_numerics_record; torch.ones(2).sum(); "
            "print(json.dumps(cpu_numerics_record()))")
    record = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                       cwd=REPO_ROOT, check=True).stdout)
    assert record["mode"] == "unpinned" and record["pinned_settings"] is None and record["environment"] == {}


def test_the_pin_for_a_child_process_is_a_dict_of_variables():
    from saah_lib.numerics import pin_environment

    cpu = {"machine": "x86_64", "cpu_flags": ["avx2", "fma"]}
    assert pin_environment({}, cpu) == {**PINNED_SETTINGS, SET_BY_PIN_VARIABLE: ",".join(sorted(PINNED_SETTINGS))}
    assert pin_environment({MODE_VARIABLE: "native"}, cpu) == {}
    assert pin_environment({}, {"machine": "aarch64", "cpu_flags": []}) == {}
    environ = {"ATEN_CPU_CAPABILITY": "default"}
    pin_environment(environ, cpu)
    assert environ == {"ATEN_CPU_CAPABILITY": "default"}  # the caller's environment is left alone


def test_mkl_kernels_follow_a_preloaded_answer_to_mkls_own_question(monkeypatch):
    import ctypes

    from saah_lib import numerics

    amd = {"cpu_vendor": "AuthenticAMD"}
    assert numerics.mkl_kernels(amd) == "generic"  # nothing answers in MKL's place here: the vendor decides
    assert numerics.mkl_kernels({"cpu_vendor": "GenuineIntel"}) == "Intel"

    class Preloaded:  # what LD_PRELOAD of the Intel emulation puts in the global scope
        mkl_serv_intel_cpu_true = staticmethod(lambda: 1)

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Preloaded())
    assert numerics.mkl_kernels(amd) == "Intel"
