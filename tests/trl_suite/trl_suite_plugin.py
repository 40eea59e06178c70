"""pytest plugin that runs TRL's own ``tests/test_grpo_trainer.py`` offline, with TRL's trainer or ours.

Loaded with ``-p trl_suite_plugin`` by :mod:`tests.trl_suite.suite` in a pytest of its own (never by the
project's test run). Before TRL's test module is imported it

* points ``load_dataset("trl-internal-testing/zen*", config, ...)`` at the Parquet files built by
  :mod:`fixtures` (the models need nothing here: ``HF_HUB_CACHE`` points at the Hub cache it built);
* puts back the one name TRL 1.16.0 lacks that TRL's newer test helpers import (see :data:`ADAPTATIONS`);
* with ``SAAH_TRL_SUITE_TRAINER`` = ``grpo`` or ``sa``, replaces ``trl.GRPOTrainer`` and ``trl.GRPOConfig``
  (the names the test module imports) by ``SAAHGRPOTrainer`` and ``SAAHGRPOConfig`` whose defaults are
  ``method="grpo"``, ``alpha=0`` or ``method="sa"``, ``alpha=0.5``; ``trl`` leaves TRL's classes in place.

A test that fails only because it loads a Hub model this harness does not build is reported as skipped, naming
the model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

import saah_lib.models  # noqa: F401 (ADAPTATIONS: the same attention kernels for TRL's trainer and ours)

TRAINERS = ("trl", "grpo", "sa")
#: What the harness changes so that TRL's newer test files run against TRL 1.16.0, and why.
ADAPTATIONS = {
    "trl.import_utils.is_joblib_available": "TRL's testing_utils imports it (require_sklearn); TRL 1.16.0 no longer "
                                            "defines it, so the harness defines it (joblib importable or not)",
    "TestGRPORolloutDispatch::_make_trainer": "its hand-built trainer (object.__new__, attributes set one by one) "
                                              "lacks eos_token_ids, which TRL 1.16.0's _generate reads (newer TRL "
                                              "does not); the harness sets it to [the test tokenizer's eos id]",
    "saah_lib.models.sdpa_attention": "imported in every configuration, TRL's own included, so that all three run "
                                      "the same attention kernels: under the AVX2 pin on a CPU with AMX, torch's "
                                      "bf16 flash kernel fails ('pack_vnni2 is only supported when avx512 ...'), "
                                      "and the library runs bf16 attention on the math kernel there (elsewhere "
                                      "nothing changes)",
}
#: Tests of behaviour TRL gained after 1.16.0: skipped in every configuration, with the reason.
NEWER_THAN_TRL_1_16 = {
    "TestGRPOTrainer::test_liger_kernel_with_peft_non_lm_head_target_allowed":
        "expects use_liger_kernel without liger-kernel installed to raise ImportError at init; TRL 1.16.0 does not",
    "TestGRPOTrainer::test_liger_kernel_with_peft_modules_to_save_lm_head_allowed":
        "expects use_liger_kernel without liger-kernel installed to raise ImportError at init; TRL 1.16.0 does not",
    "TestGRPOTrainer::test_liger_kernel_with_peft_prompt_learning_raises":
        "expects the Liger/prompt-learning PEFT guard, which TRL 1.16.0 lacks",
    "TestGRPOTrainer::test_train_moe_peft_model":
        "expects no 'ref' adapter beside a target_parameters LoRA; TRL 1.16.0 adds one with PEFT >= 0.20 "
        "(grpo_trainer.py: 'fixed in peft#3350')",
    "TestGRPOTrainer::test_entropy_bonus_flows_gradients":
        "expects entropies detached when the entropy bonus is off; TRL 1.16.0 always returns them with their graph",
}
HUB_ID = re.compile(r"trl-internal-testing/(?:tiny|small)-[A-Za-z0-9_.-]+")  # models, not the zen data sets


def _cache() -> Path:
    return Path(os.environ["SAAH_TRL_SUITE_CACHE"])


def _manifest() -> dict:
    return json.loads((_cache() / "manifest.json").read_text())


def _add_missing_trl_names() -> None:
    from trl import import_utils

    if not hasattr(import_utils, "is_joblib_available"):
        import_utils.is_joblib_available = lambda: importlib.util.find_spec("joblib") is not None


def _redirect_zen_datasets() -> None:
    """``datasets.load_dataset`` reading the zen configurations from local Parquet files (streaming included)."""
    import datasets
    from fixtures import local_dataset_files

    hub_load = datasets.load_dataset
    root = _cache() / "datasets"

    def load_dataset(path, name=None, *args, **kwargs):
        files = local_dataset_files(root, path, name) if isinstance(path, str) else None
        if files is None:
            return hub_load(path, name, *args, **kwargs)
        return hub_load("parquet", None, *args, data_files=files, **kwargs)

    datasets.load_dataset = load_dataset


def _substitute_trainer(kind: str) -> None:
    import trl
    from trl_suite_trainers import SUBSTITUTES

    trl.GRPOTrainer, trl.GRPOConfig = SUBSTITUTES[kind]


def pytest_configure(config):
    kind = os.environ.get("SAAH_TRL_SUITE_TRAINER", "trl")
    if kind not in TRAINERS:
        raise pytest.UsageError(f"SAAH_TRL_SUITE_TRAINER={kind!r}: expected one of {', '.join(TRAINERS)}")
    _add_missing_trl_names()
    _redirect_zen_datasets()
    if kind != "trl":
        _substitute_trainer(kind)
    config.stash[_BUILT] = set(_manifest()["models"])


_BUILT = pytest.StashKey[set]()


def pytest_collection_modifyitems(config, items):
    for item in items:
        test_id = f"{item.cls.__name__}::{item.originalname}" if item.cls else item.originalname
        if test_id in NEWER_THAN_TRL_1_16:
            item.add_marker(pytest.mark.skip(reason=f"newer than TRL 1.16.0: {NEWER_THAN_TRL_1_16[test_id]}"))
    _give_dispatch_trainer_eos_ids(items)


def _give_dispatch_trainer_eos_ids(items) -> None:
    classes = {item.cls for item in items if item.cls is not None and item.cls.__name__ == "TestGRPORolloutDispatch"}
    for cls in classes:
        make = cls._make_trainer
        if getattr(make, "_saah_adapted", False):
            continue

        def _make_trainer(self, _make=make):
            trainer = _make(self)
            trainer.eos_token_ids = [trainer._tokenizer.eos_token_id]
            return trainer

        _make_trainer._saah_adapted = True
        cls._make_trainer = _make_trainer


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure that names a Hub model this harness does not build is reported as a skip naming it."""
    outcome = yield
    report = outcome.get_result()
    if call.when not in ("setup", "call") or call.excinfo is None or not report.failed:
        return
    if not isinstance(call.excinfo.value, (OSError, ValueError)):  # what from_pretrained raises offline
        return
    named = set(HUB_ID.findall(str(report.longrepr)))  # the test's source lines name the model
    missing = sorted(named - item.config.stash[_BUILT])
    if missing:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"model not built offline: {', '.join(missing)}")
