"""The run profile: clocks that add up to the wall time, restore what they wrap, and a file from a short run."""

import json
import time

import pytest

from saah_lib.studies.bench import run_profile
from saah_lib.studies.bench.run_profile import SectionClock


class Work:
    def outer(self, clock_s):
        time.sleep(clock_s)
        return self.inner(clock_s)

    def inner(self, clock_s):
        time.sleep(clock_s)
        return "done"


class Child(Work):
    pass


def test_nested_clocks_count_exclusive_time_and_the_originals_come_back():
    clock = SectionClock()
    original_outer, original_inner = Work.__dict__["outer"], Work.__dict__["inner"]
    with clock.clocked([(Work, "outer", "outer"), (Work, "inner", lambda: "inner"), (Child, "inner", "child")]):
        start = time.perf_counter()
        assert Child().outer(0.05) == "done"  # Child's inner (its own wrapper) runs inside Work's outer
        wall = time.perf_counter() - start
    assert Work.__dict__["outer"] is original_outer and Work.__dict__["inner"] is original_inner
    assert "inner" not in Child.__dict__  # an inherited method: the wrapper deleted, not left behind
    shares = clock.shares(wall)
    assert shares["outer"]["seconds"] == pytest.approx(0.05, abs=0.02)
    assert shares["child"]["seconds"] + shares.get("inner", {"seconds": 0})["seconds"] == pytest.approx(0.05, abs=0.02)
    assert sum(entry["seconds"] for entry in shares.values()) == pytest.approx(wall, abs=0.005)


class Broken:
    def fail(self):
        raise ValueError("planted")


def test_a_clocked_method_that_raises_is_counted_and_restored_when_the_error_leaves_the_block():
    clock, original = SectionClock(), Broken.__dict__["fail"]
    with pytest.raises(ValueError, match="planted"), clock.clocked([(Broken, "fail", "failing")]):
        Broken().fail()
    assert Broken.__dict__["fail"] is original
    assert clock.calls["failing"] == 1 and clock._stack == []


@pytest.mark.slow
def test_a_short_run_and_build_write_one_file_whose_shares_add_up(tmp_path, capsys):
    assert run_profile.main(["--steps", "2", "--sft-steps", "4", "--out", str(tmp_path)]) == 0
    report = json.loads(next(tmp_path.glob("*-run-profile.json")).read_text())
    assert report["matmul_gflops_fp32_one_thread"] > 0
    run, build = report["run"], report["warm_start_build"]
    assert run["steps"] == 2 and build["sft_steps"] == 4
    for part in (run, build):
        assert sum(e["share"] for e in part["categories"].values()) == pytest.approx(1.0, abs=0.01)
    for category in ("generation", "loss forward", "backward", "evaluations", "setup (data, model, trainer build)"):
        assert run["categories"][category]["calls"] >= 1
    assert run["categories"]["generation"]["floor_s"] > 0 and run["categories"]["backward"]["times_floor"] > 0
    assert build["categories"]["SFT forward"]["calls"] == 4
    assert "wrote" in capsys.readouterr().out


def test_an_sft_step_runs_the_shared_prefix_once_and_each_examples_rest():
    examples = [([1, 2, 3, 4, 5], 4), ([1, 2, 3, 9], 3)]  # the system turn 1 2 3 is shared
    assert run_profile.sft_step_tokens(examples, batch_size=2) == 3 + 2 * (2 + 1) / 2
