"""TRL's own ``tests/test_grpo_trainer.py`` run three times, offline: with TRL's ``GRPOTrainer``, with
``SAAHGRPOTrainer`` at ``method="grpo"``/alpha 0, and at ``method="sa"``/alpha 0.5.

TRL's test files are read where they lie (``<repo>/../shared/trl/``, or the folder in ``SAAH_TRL_TESTS``), never
copied into the repository. The tiny models and data sets they name are built once into a cache folder
(``SAAH_TRL_SUITE_CACHE``, default ``<tmp>/saah-trl-suite``) by :mod:`fixtures`. Each configuration runs in a pytest
process of its own with :mod:`trl_suite_plugin`, which writes JUnit XML that :func:`outcomes` reads.

As a script (``python tests/trl_suite/suite.py --out results/trl_suite/counts.json``) it runs the three and
writes their counts, the comparisons and the harness's adaptations to the file. ``SAAH_TRL_SUITE_JOBS=3`` runs
the three configurations at once where three cores are free (each pytest uses one thread).
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))  # fixtures and the plugin, imported by name as in the suite's own process

from fixtures import read_manifest
from trl_suite_plugin import ADAPTATIONS, NEWER_THAN_TRL_1_16

TEST_FILE = Path("tests") / "test_grpo_trainer.py"
#: The phrase of TRL's "training changed every parameter" check (``assert not torch.equal(param, new_param), ...``)
TRAINS_AND_CHANGES = "has not changed"
#: The error SAAHGRPOConfig/SAAHGRPOTrainer raises where the weights cannot act (sequence-level importance
#: sampling with the grpo or sapo loss: the weights cancel), for which sa/0.5 refuses to run by design
#: (saah_lib.method.methods.weights_problem).
SA_REFUSAL = "the weights cancel"
CONFIGURATIONS = {"trl": "GRPOTrainer (TRL)", "grpo": "SAAHGRPOTrainer method=grpo alpha=0",
                  "sa": "SAAHGRPOTrainer method=sa alpha=0.5"}


def trl_tests_root() -> Path | None:
    """The folder holding TRL's ``tests/test_grpo_trainer.py``, or None where it is absent."""
    given = os.environ.get("SAAH_TRL_TESTS")
    candidates = [Path(given)] if given else [REPO_ROOT.parent / "shared" / "trl"]
    for folder in candidates:
        for root in (folder, folder.parent):  # the folder above tests/, or tests/ itself
            if (root / TEST_FILE).is_file():
                return root.resolve()
    return None


def cache_folder() -> Path:
    return Path(os.environ.get("SAAH_TRL_SUITE_CACHE", Path(tempfile.gettempdir()) / "saah-trl-suite"))


def ensure_built(cache: Path) -> dict:
    """The models and data sets, built once (in a process of their own; a lock keeps two builders apart)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = read_manifest(cache)
        if manifest is None:
            (cache / "manifest.json").unlink(missing_ok=True)
            subprocess.run([sys.executable, str(HERE / "fixtures.py"), str(cache)], check=True, env=_env(cache),
                           capture_output=True, text=True)
            manifest = read_manifest(cache)
    return manifest


def _env(cache: Path, kind: str = "trl") -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(HERE)]), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "HF_HUB_CACHE": str(cache / "hub"), "SAAH_TRL_SUITE_CACHE": str(cache),
            "SAAH_TRL_SUITE_TRAINER": kind, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}


def run_configuration(kind: str, trl_root: Path, cache: Path, junit: Path, extra_args=(),
                      timeout: float = 3600) -> dict:
    """Run TRL's test file with one trainer; returns ``{"outcomes": {test id: outcome}, "seconds": ...}``."""
    command = [sys.executable, "-m", "pytest", "-p", "trl_suite_plugin", "-p", "no:xdist", "-p", "no:cacheprovider",
               "-p", "no:warnings", "-q", "--rootdir", str(trl_root), f"--junitxml={junit}", str(TEST_FILE),
               *extra_args]
    start = time.monotonic()
    done = subprocess.run(command, check=False, cwd=trl_root, env=_env(cache, kind), capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.monotonic() - start
    if not junit.is_file():
        raise RuntimeError(f"pytest with {kind} wrote no report (exit {done.returncode}):\n{done.stdout[-3000:]}"
                           f"\n{done.stderr[-3000:]}")
    return {"outcomes": outcomes(junit), "seconds": round(seconds, 1), "exit": done.returncode,
            "tail": done.stdout[-2000:]}


def outcomes(junit: Path) -> dict[str, dict]:
    """``{test id: {"outcome": passed | failed | skipped, "message": ...}}`` from pytest's JUnit XML
    (xfail counts as skipped; an error in setup or teardown as failed)."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}"
        failed = [e for e in case if e.tag in ("failure", "error")]
        skipped = [e for e in case if e.tag == "skipped"]
        if failed:
            found[test_id] = {"outcome": "failed", "message": (failed[0].get("message") or "")[:500]}
        elif skipped:
            found[test_id] = {"outcome": "skipped", "message": (skipped[0].get("message") or "")[:300]}
        else:
            found[test_id] = {"outcome": "passed", "message": ""}
    return found


def training_tests(test_file: Path) -> set[str]:
    """``Class::test_name`` of the tests that train and check that every parameter changed."""
    tree = ast.parse(test_file.read_text())
    found = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
            if TRAINS_AND_CHANGES in ast.get_source_segment(test_file.read_text(), fn):
                found.add(f"{cls.name}::{fn.name}")
    return found


def _function(test_id: str) -> str:
    """``Class::test_name`` of a test id (its parameters dropped)."""
    return test_id.split("[", 1)[0]


def counts(found: dict[str, dict]) -> dict[str, int]:
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    for entry in found.values():
        tally[entry["outcome"]] += 1
    return tally


def compare(results: dict[str, dict], trains: set[str]) -> dict:
    """The acceptance checks: every test TRL's trainer passes, ours passes at alpha 0; every training test it
    passes, ours passes at sa/0.5 too, except where the config refuses the combination by design."""
    def passed(kind):
        return {t for t, e in results[kind]["outcomes"].items() if e["outcome"] == "passed"}

    trl_passed = passed("trl")
    sa = results["sa"]["outcomes"]
    refused = sorted(t for t in trl_passed if SA_REFUSAL in sa.get(t, {}).get("message", ""))
    required_sa = {t for t in trl_passed if _function(t) in trains} - set(refused)
    return {
        "passed_by_trl_not_by_grpo_alpha0": sorted(trl_passed - passed("grpo")),
        "training_tests_passed_by_trl_not_by_sa": sorted(required_sa - passed("sa")),
        "training_tests_required_of_sa": len(required_sa),
        "sa_refused_by_design": refused,
        "passed_by_trl_not_by_sa_other": sorted(trl_passed - passed("sa") - required_sa - set(refused)),
    }


def suite_jobs() -> int:
    """How many configurations run at once (``SAAH_TRL_SUITE_JOBS``, default 1: each pytest runs on one core)."""
    value = os.environ.get("SAAH_TRL_SUITE_JOBS", "1")
    if not value.isdigit() or not 1 <= int(value) <= len(CONFIGURATIONS):
        raise ValueError(f"SAAH_TRL_SUITE_JOBS={value!r}: expected a whole number from 1 to {len(CONFIGURATIONS)}")
    return int(value)


def run_suite(out_dir: Path, kinds=tuple(CONFIGURATIONS), extra_args=(), timeout: float = 3600) -> dict:
    """Run every configuration, :func:`suite_jobs` at a time; the summary of counts and checks."""
    trl_root = trl_tests_root()
    if trl_root is None:
        raise FileNotFoundError("TRL's tests/test_grpo_trainer.py not found (../shared/trl or SAAH_TRL_TESTS)")
    cache = cache_folder()
    manifest = ensure_built(cache)
    with ThreadPoolExecutor(max_workers=suite_jobs()) as pool:  # threads only wait on their pytest processes
        running = {kind: pool.submit(run_configuration, kind, trl_root, cache, out_dir / f"{kind}.xml", extra_args,
                                     timeout)
                   for kind in kinds}
        results = {kind: future.result() for kind, future in running.items()}
    summary = {
        "configurations": {k: {"trainer": CONFIGURATIONS[k], **counts(r["outcomes"]), "seconds": r["seconds"]}
                           for k, r in results.items()},
        "adaptations": ADAPTATIONS,
        "skipped_as_newer_than_trl_1_16": NEWER_THAN_TRL_1_16,
        "models_built": manifest["models"],
        "vlm_problem": manifest["vlm_problem"],
        "outcomes": {k: {t: e["outcome"] for t, e in sorted(r["outcomes"].items())} for k, r in results.items()},
    }
    if set(kinds) == set(CONFIGURATIONS):
        summary["checks"] = compare(results, training_tests(trl_root / TEST_FILE))
    summary["_results"] = results
    return summary


def _without_local_paths(text: str) -> str:
    """A failure message fit to commit: this machine's folders named by their role."""
    for folder, name in ((trl_tests_root(), "<trl>"), (cache_folder(), "<cache>"), (REPO_ROOT, "<repo>"),
                         (Path(sys.prefix), "<python>"), (Path(tempfile.gettempdir()), "<tmp>")):
        if folder is not None:
            text = text.replace(str(folder), name)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the counts and checks")
    parser.add_argument("--hours", type=float, default=1.0,
                        help="the most one configuration's pytest may run (the whole file takes longer on 2 cores)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -k train_loss")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_suite(Path(tmp), extra_args=args.pytest_args, timeout=args.hours * 3600)
    results = summary.pop("_results")
    failures = {k: {t: _without_local_paths(e["message"]) for t, e in r["outcomes"].items()
                    if e["outcome"] == "failed"} for k, r in results.items()}
    summary["failures"] = failures
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({"configurations": summary["configurations"], "checks": summary.get("checks")}, indent=1))
    checks = summary.get("checks", {})
    return 1 if checks.get("passed_by_trl_not_by_grpo_alpha0") or checks.get(
        "training_tests_passed_by_trl_not_by_sa") else 0


if __name__ == "__main__":
    sys.exit(main())
