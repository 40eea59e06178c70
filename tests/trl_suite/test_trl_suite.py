"""TRL's own GRPOTrainer tests as the acceptance test of SAAHGRPOTrainer (see suite.py).

The end-to-end test runs TRL's ``tests/test_grpo_trainer.py`` with TRL's trainer and with ours (``grpo``/alpha 0,
``sa``/alpha 0.5) and asserts: every test TRL's trainer passes, ours passes at alpha 0; every test that trains and
checks that the parameters changed and that TRL's trainer passes, ours passes at sa/0.5 (but where our config
refuses the combination by design). The quick tests check the harness's own parts.
"""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite
from fixtures import local_dataset_files

TRL_ROOT = suite.trl_tests_root()
needs_trl_tests = pytest.mark.skipif(TRL_ROOT is None, reason="TRL's tests/test_grpo_trainer.py not found "
                                                              "(../shared/trl, or set SAAH_TRL_TESTS)")


def _junit(path: Path, cases: list[str]) -> Path:
    path.write_text("<testsuites><testsuite>" + "".join(cases) + "</testsuite></testsuites>")
    return path


def test_outcomes_reads_passed_failed_skipped_and_xfail_from_junit(tmp_path):
    junit = _junit(tmp_path / "r.xml", [
        '<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_a"/>',
        ('<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_b[x]">'
        '<failure message="boom">tb</failure></testcase>'),
        ('<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_c">'
        '<error message="setup">tb</error></testcase>'),
        ('<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_d">'
        '<skipped type="pytest.skip" message="no gpu"/></testcase>'),
        ('<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_e">'
        '<skipped type="pytest.xfail" message="known"/></testcase>'),
    ])
    found = suite.outcomes(junit)
    assert {t: e["outcome"] for t, e in found.items()} == {
        "TestGRPOTrainer::test_a": "passed", "TestGRPOTrainer::test_b[x]": "failed",
        "TestGRPOTrainer::test_c": "failed", "TestGRPOTrainer::test_d": "skipped",
        "TestGRPOTrainer::test_e": "skipped"}
    assert suite.counts(found) == {"passed": 1, "failed": 2, "skipped": 2}


def _results(**kinds):
    return {kind: {"outcomes": {t: {"outcome": o, "message": m} for t, (o, m) in tests.items()}}
            for kind, tests in kinds.items()}


def test_compare_flags_a_test_trl_passes_and_ours_fails_and_nothing_else():
    ok = ("passed", "")
    trains = {"TestGRPOTrainer::test_train"}
    same = _results(trl={"TestGRPOTrainer::test_train[a]": ok, "TestGRPOTrainer::test_init": ok},
                    grpo={"TestGRPOTrainer::test_train[a]": ok, "TestGRPOTrainer::test_init": ok},
                    sa={"TestGRPOTrainer::test_train[a]": ok, "TestGRPOTrainer::test_init": ("failed", "x")})
    checks = suite.compare(same, trains)
    assert checks["passed_by_trl_not_by_grpo_alpha0"] == []
    assert checks["training_tests_passed_by_trl_not_by_sa"] == []
    assert checks["passed_by_trl_not_by_sa_other"] == ["TestGRPOTrainer::test_init"]  # not a training test
    # a planted regression: ours fails a test TRL passes, at alpha 0 and at sa/0.5
    broken = _results(trl={"TestGRPOTrainer::test_train[a]": ok}, grpo={"TestGRPOTrainer::test_train[a]": (
        "failed", "boom")}, sa={"TestGRPOTrainer::test_train[a]": ("failed", "boom")})
    checks = suite.compare(broken, trains)
    assert checks["passed_by_trl_not_by_grpo_alpha0"] == ["TestGRPOTrainer::test_train[a]"]
    assert checks["training_tests_passed_by_trl_not_by_sa"] == ["TestGRPOTrainer::test_train[a]"]
    # refused by design (the weights would cancel): listed apart, not required
    refused = _results(trl={"TestGRPOTrainer::test_train[a]": ok}, grpo={"TestGRPOTrainer::test_train[a]": ok},
                       sa={"TestGRPOTrainer::test_train[a]": ("failed", f"ValueError: ... {suite.SA_REFUSAL} ...")})
    checks = suite.compare(refused, trains)
    assert checks["training_tests_passed_by_trl_not_by_sa"] == []
    assert checks["sa_refused_by_design"] == ["TestGRPOTrainer::test_train[a]"]


@needs_trl_tests
def test_training_tests_are_found_in_trls_test_file():
    trains = suite.training_tests(TRL_ROOT / suite.TEST_FILE)
    assert "TestGRPOTrainer::test_train" in trains
    assert "TestGRPOTrainer::test_init_minimal" not in trains  # builds a trainer, never trains


def test_zen_files_are_named_only_for_the_built_data_sets(tmp_path):
    folder = tmp_path / "zen" / "standard_prompt_only"
    folder.mkdir(parents=True)
    (folder / "train.parquet").write_bytes(b"")
    assert local_dataset_files(tmp_path, "trl-internal-testing/zen", "standard_prompt_only") == {
        "train": str(folder / "train.parquet")}
    assert local_dataset_files(tmp_path, "trl-internal-testing/zen", "standard_preference") is None
    assert local_dataset_files(tmp_path, "openai/gsm8k", "main") is None


#: The tests make test-e2e runs (pytest -k): every TRL loss type, trained with TRL's trainer and ours. TRL's whole
#: file takes over an hour on 2 cores (its tiny models keep Qwen's 152k vocabulary), so it is one setting away:
#: SAAH_TRL_SUITE_K="" runs every test (or python tests/trl_suite/suite.py --out FILE, which writes the counts).
CI_SELECTION = "test_train_loss_types and (bnpo or dapo or cispo)"


@pytest.mark.e2e
@needs_trl_tests
def test_ours_passes_every_test_trls_grpo_trainer_passes(tmp_path):
    selection = os.environ.get("SAAH_TRL_SUITE_K", CI_SELECTION)
    summary = suite.run_suite(tmp_path, extra_args=("-k", selection) if selection else ())
    results = summary.pop("_results")
    print(json.dumps({k: v for k, v in summary.items() if k != "outcomes"}, indent=1))
    for kind, result in results.items():
        assert result["outcomes"], f"{kind}: no test ran\n{result['tail']}"
    checks = summary["checks"]
    assert checks["passed_by_trl_not_by_grpo_alpha0"] == [], {
        t: results["grpo"]["outcomes"][t] for t in checks["passed_by_trl_not_by_grpo_alpha0"]}
    assert checks["training_tests_passed_by_trl_not_by_sa"] == [], {
        t: results["sa"]["outcomes"][t] for t in checks["training_tests_passed_by_trl_not_by_sa"]}
    assert checks["training_tests_required_of_sa"] > 0
