"""Which environment settings change the bits of a CPU study? (the measurement behind saah_lib.numerics)

    .venv/bin/python -m bench.cpu_numerics_probe                  # every configuration of CONFIGS
    .venv/bin/python -m bench.cpu_numerics_probe --emulate-intel-mkl   # also MKL's Intel code paths (needs gcc)
    .venv/bin/python -m bench.cpu_numerics_probe --emulate-intel-mkl --repeat 3 --only pin+mkl-cbwr-avx2   # cost

Each configuration runs in a fresh process (:func:`probe`): a short warm-start build and a short GRPO run,
whose results' sha256 group the configurations: settings in one group change nothing here. ``--repeat N``
runs the configurations N times in turn (A B C A B C ...), so that a busy machine slows each alike, and reports
median seconds against the first configuration named. ``--emulate-intel-mkl`` makes MKL on an AMD CPU run the
code paths it chooses on Intel CPUs (:func:`fake_intel_library`); ``--emulation-library DIR`` only builds that
library and prints its path, so that a whole command runs them (docs/reproducibility.md)::

    LD_PRELOAD=$(.venv/bin/python -m bench.cpu_numerics_probe --emulation-library /tmp/intel-mkl) \\
        make mini MINI_ARGS="--rerun-root results/rerun/mini-intel-mkl"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from saah_lib.numerics import SET_BY_PIN_VARIABLE, cpu_description

REPO = Path(__file__).resolve().parents[1]
PIN = {"ATEN_CPU_CAPABILITY": "avx2"}
CONFIGS = {
    "pin": PIN,
    "native-avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "pin+mkl-cbwr-avx2": {**PIN, "MKL_CBWR": "AVX2"},
    "pin+onednn-avx2": {**PIN, "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "pin+mkl-cbwr-compatible": {**PIN, "MKL_CBWR": "COMPATIBLE"},
    "pin+mkl-cbwr-avx2-strict": {**PIN, "MKL_CBWR": "AVX2,STRICT"},
    "pin+mkl-cbwr-sse2": {**PIN, "MKL_CBWR": "SSE2"},
}
INTEL_CONFIGS = {
    "pin+intel-mkl": PIN,
    "pin+intel-mkl+mkl-cbwr-avx2": {**PIN, "MKL_CBWR": "AVX2"},
    "pin+intel-mkl+mkl-cbwr-compatible": {**PIN, "MKL_CBWR": "COMPATIBLE"},
    "pin+intel-mkl+mkl-cbwr-avx2-strict": {**PIN, "MKL_CBWR": "AVX2,STRICT"},
    "pin+intel-mkl+mkl-cbwr-sse2": {**PIN, "MKL_CBWR": "SSE2"},
    "pin+intel-mkl+mkl-cbwr-sse4_2": {**PIN, "MKL_CBWR": "SSE4_2"},
    "pin+intel-mkl+mkl-cbwr-auto": {**PIN, "MKL_CBWR": "AUTO"},
}
MKL_HEADER = "import torch; torch.ones(8, 8) @ torch.ones(8, 8)"  # one matrix product: MKL_VERBOSE names its path
FAKE_INTEL = "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n"

CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
import saah_lab.studies  # applies the pin (or native mode) as every study process does
import torch
torch.set_num_threads(1)
from saah_lab.training.run import run_training
from saah_lib.models.warmstart import WarmStartSettings, build_warm_start, read_build_info
from saah_lib.training.config import make_config

out = Path(sys.argv[1])
settings = WarmStartSettings(sft_steps=int(sys.argv[2]), n_sft_problems=8 * int(sys.argv[2]), n_heldout=40)
started = time.perf_counter()
model = build_warm_start(out / "warmstart", settings=settings, force=True, progress=False)
built = time.perf_counter() - started
result = {"capability": torch.backends.cpu.get_cpu_capability(),
          "weights": hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest(),
          "heldout_pass_at_1": read_build_info(model)["heldout_pass_at_1"], "build_s": round(built, 1)}
if int(sys.argv[3]):
    cfg = make_config("tiny", model_name=str(model), method="sa", seed=0, max_steps=int(sys.argv[3]),
                      eval_every=int(sys.argv[3]), n_eval=40, save_steps=1000, results_dir=str(out / "results"))
    started = time.perf_counter()
    run = run_training(cfg, progress=False)
    result["train_s"] = round(time.perf_counter() - started, 1)
    log = [{k: v for k, v in json.loads(line).items() if k != "step_time"}
           for line in (run / "train_log.jsonl").read_text().splitlines()]
    samples = sorted((run / "eval_samples").glob("*.jsonl"))
    result["train_log"] = hashlib.sha256(json.dumps(log).encode()).hexdigest()
    result["completions"] = hashlib.sha256(b"".join(p.read_bytes() for p in samples)).hexdigest()
    result["final_reward_mean"] = log[-1]["reward_mean"]
print("PROBE " + json.dumps(result))
"""


def fake_intel_library(folder: Path) -> Path:
    """Build the two-function library that, preloaded, tells MKL the CPU is an Intel one.

    On an AMD CPU MKL then runs the code paths it chooses on Intel CPUs (AVX-512, or AVX2 under ``MKL_CBWR=AVX2``);
    MKL_VERBOSE's first line names the path. It is an emulation: the kernels are Intel's, the machine is not.
    """
    source, library = folder / "fake_intel.c", folder / "libfake_intel.so"
    source.write_text(FAKE_INTEL)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def probe(name: str, settings: dict, folder: Path, sft_steps: int, grpo_steps: int, preload: Path | None) -> dict:
    """One configuration in a fresh process with ``SAAH_CPU_NUMERICS=native`` (so that ``import saah_lib`` leaves
    the environment as given): a short warm-start build at the study's model size (sha256 of its weights) and a
    short GRPO run of the tiny profile from it (sha256 of its train log without wall times, and of its evaluation
    completions)."""
    # without the pin's record too: a native child drops the variables it names (this process is pinned by bench)
    dropped = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", SET_BY_PIN_VARIABLE)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(settings, SAAH_CPU_NUMERICS="native", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", ONEDNN_VERBOSE="1",
               OMP_NUM_THREADS="1")
    if preload:
        env["LD_PRELOAD"] = str(preload)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder / name), str(sft_steps), str(grpo_steps)],
                          env=env, cwd=folder, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    result = next((json.loads(x[6:]) for x in lines if x.startswith("PROBE ")), None)
    if done.returncode or result is None:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    wall = round(time.perf_counter() - started, 1)
    header = subprocess.run([sys.executable, "-c", MKL_HEADER], env={**env, "MKL_VERBOSE": "1"}, capture_output=True,
                            text=True).stdout
    mkl = next((x for x in header.splitlines() if x.startswith("MKL_VERBOSE oneMKL")), "")
    result.update(settings=settings, wall_s=wall, mkl_path=mkl.split(" for ")[-1].split(",")[0] if mkl else None,
                  onednn_primitives_run=sum("onednn_verbose" in x and ",exec," in x for x in lines))
    return result


def _merge_repetitions(name: str, repetitions: list[dict]) -> dict:
    """One configuration's result: its bits (which every repetition must share) and its median timings."""
    bits = ("weights", "train_log", "completions")
    if len({tuple(r.get(k) for k in bits) for r in repetitions}) != 1:
        raise RuntimeError(f"{name}: repetitions gave different bits: the workload is not deterministic here")
    merged = dict(repetitions[0])
    for key in ("build_s", "train_s", "wall_s"):
        values = [r[key] for r in repetitions if r.get(key) is not None]
        if values:
            merged[key] = statistics.median(values)
            merged[f"{key}_all"] = values
    return merged


def _print_costs(results: dict, reference: str) -> None:
    print(f"\nmedian seconds, and the ratio to {reference}:")
    for name, r in results.items():
        ratios = [f"{key} {r[key]:.1f} ({r[key] / results[reference][key]:.2f}x)"
                  for key in ("build_s", "train_s") if r.get(key) and results[reference].get(key)]
        print(f"  {name}: " + ", ".join(ratios))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_numerics_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="configuration names (default: all)")
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--grpo-steps", type=int, default=4, help="0: warm start only")
    parser.add_argument("--emulate-intel-mkl", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="run the configurations this many times in turn")
    parser.add_argument("--emulation-library", type=Path, metavar="DIR",
                        help="only build the Intel-emulation library into DIR and print its path, for LD_PRELOAD "
                             "of a whole command (e.g. make mini)")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if args.emulation_library:
        args.emulation_library.mkdir(parents=True, exist_ok=True)
        print(fake_intel_library(args.emulation_library))
        return
    configs = {**CONFIGS, **(INTEL_CONFIGS if args.emulate_intel_mkl else {})}
    unknown = sorted(set(args.only or ()) - set(configs))
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {sorted(configs)}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    chosen = [name for name in (args.only or configs)]
    runs: dict[str, list[dict]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory(prefix="numerics-probe-") as tmp:
        preload = fake_intel_library(Path(tmp)) if args.emulate_intel_mkl else None
        for repetition in range(args.repeat):
            (Path(tmp) / str(repetition)).mkdir()
            for name in chosen:
                result = probe(name, configs[name], Path(tmp) / str(repetition), args.sft_steps, args.grpo_steps,
                               preload if "intel-mkl" in name else None)
                runs[name].append(result)
                print(name, json.dumps(result), flush=True)
    results = {name: _merge_repetitions(name, rs) for name, rs in runs.items()}
    if args.repeat > 1:
        _print_costs(results, chosen[0])
    groups: dict[tuple, list[str]] = {}
    for name, r in results.items():
        groups.setdefault((r["weights"], r.get("train_log"), r.get("completions")), []).append(name)
    print("\nidentical results:")
    for key, names in groups.items():
        print(f"  weights {key[0][:12]} train log {(key[1] or '-')[:12]} completions {(key[2] or '-')[:12]}: "
              + ", ".join(names))
    if args.out:
        command = " ".join(["python -m bench.cpu_numerics_probe", *(argv or sys.argv[1:])])
        args.out.write_text(json.dumps({"command": command, "cpu": cpu_description(), "sft_steps": args.sft_steps,
                                        "grpo_steps": args.grpo_steps,
                                        "repeat": args.repeat, "results": results,
                                        "groups": list(groups.values())}, indent=1) + "\n")


if __name__ == "__main__":
    main()
