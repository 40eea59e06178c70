"""What the study commands refuse before any work, and how they promote: committed roots are never a rerun's, a
root given as a study's is that study's, a damaged rerun is never promoted, an interrupted promote loses nothing,
and an interrupted command leaves no Ray process (on fakes: nothing here trains or starts Ray)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from saah_lab.analysis.plan import write_plan
from saah_lab.studies import extended, mini, real_study
from saah_lib.paths import COMMITTED_STUDY_ROOTS, MINI_ROOT, REAL_STUDY_ROOT, RESULTS
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE

COMMANDS = {"mini": mini.main, "extended": extended.main, "real_study": real_study.main}


@pytest.fixture
def no_work(monkeypatch):
    """Every stage that would build or train fails the test: a refusal must come before them."""
    def worked(*args, **kwargs):
        raise AssertionError("the command started its work")

    for module, name in ((real_study, "build_warm_start"), (real_study, "run_plan"), (mini, "_run_mini"),
                         (extended, "make_plan")):
        monkeypatch.setattr(module, name, worked)


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for root in roots for p in sorted(root.rglob("*"))
            if p.is_file()}


def refused(study: str, argv: list, capsys, *named) -> str:
    """Run a study command that must exit 1 with an error naming each of ``named``."""
    with pytest.raises(SystemExit) as stop:
        COMMANDS[study]([str(a) for a in argv])
    err = capsys.readouterr().err
    assert stop.value.code == 1, err
    for name in named:
        assert str(name) in err, err
    return err


def _finish(cfg) -> None:
    run = RunDir(cfg.run_dir)
    run.log_step({"step": cfg.trainer.max_steps, "reward_mean": 1.0})
    run.log_eval({"step": cfg.trainer.max_steps, "pass_at_1": 0.5}, [{"id": "p", "correct": True}])


def finished_rerun(study: str, rerun: Path) -> Path:
    """A rerun that promote takes as finished (a run is complete with its last step logged and evaluated)."""
    rerun.mkdir(parents=True)
    if study == "mini":
        (rerun / MATCHED_ALPHA_FILE).write_text('{"alpha": 5.9}\n')
        write_plan(rerun, mini.study_plan(mini.SEEDS, 5.9))
        configs = mini.planned_configs(rerun)
        for name in mini.PROMOTED_FILES + ("reproduction.json",):
            if not (rerun / name).exists():
                (rerun / name).write_text("{}\n")
    else:
        (rerun / "warmstart_build.json").write_text('{"paper_matched_alpha": 1.9}\n')
        (rerun / "timings.json").write_text("{}\n")
        write_plan(rerun, real_study.study_plan(1.9))
        configs = real_study.planned_configs(rerun, 1.9)
    for cfg in configs:
        _finish(cfg)
    (rerun / "baselines" / "b").mkdir(parents=True)
    return rerun


def promote(study: str, rerun: Path, committed: Path) -> None:
    if study == "mini":
        mini.promote(rerun, committed, figures=False)
    else:
        real_study.promote(rerun, committed)


@pytest.fixture
def no_render(monkeypatch):
    monkeypatch.setattr(real_study, "render_report", lambda: None)  # it would draw the committed paper's tables


# --------------------------------------------------------------------------- item 1: committed roots

@pytest.mark.parametrize("rerun", [REAL_STUDY_ROOT, MINI_ROOT, RESULTS], ids=["real_study", "mini", "results"])
@pytest.mark.parametrize("study, command", [("mini", ["verify"]), ("mini", ["promote"]), ("extended", ["--verify"]),
                                            ("real_study", ["verify"]), ("real_study", ["promote"])])
def test_no_study_command_takes_a_committed_study_or_a_folder_holding_one_as_its_rerun_root(
        study, command, rerun, no_work, no_render, capsys):
    before = snapshot(*COMMITTED_STUDY_ROOTS)
    refused(study, [*command, "--rerun-root", rerun], capsys, rerun, "committed study")
    assert snapshot(*COMMITTED_STUDY_ROOTS) == before


# --------------------------------------------------------------------------- item 2: an interrupted promote

@pytest.mark.parametrize("study", ["mini", "real_study"])
def test_a_promote_interrupted_between_its_renames_loses_nothing_and_the_next_one_finishes(
        study, tmp_path, monkeypatch, no_render):
    rerun, committed = finished_rerun(study, tmp_path / "rerun"), tmp_path / "committed"
    (committed / "runs" / "old-run").mkdir(parents=True)
    (committed / "runs" / "old-run" / "eval.jsonl").write_text('{"step": 0}\n')
    rename = os.rename

    def interrupted(src, dst, *args, **kwargs):
        if Path(dst) == committed:  # the staged copy about to take the committed name
            raise KeyboardInterrupt
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        promote(study, rerun, committed)
    where = (committed, tmp_path / ".committed.replaced")
    assert any((p / "runs" / "old-run" / "eval.jsonl").is_file() for p in where), "the committed study is gone"
    monkeypatch.setattr(os, "rename", rename)
    promote(study, rerun, committed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["committed", "rerun"]  # nothing half-done left
    assert (committed / "runs" / "old-run").is_dir() == (study == "mini")  # mini keeps runs it does not rerun
    assert len(list((committed / "runs").glob("*/eval.jsonl"))) >= 6  # the rerun's runs


# --------------------------------------------------------------------------- item 3: a damaged rerun

@pytest.mark.parametrize("study", ["mini", "real_study"])
def test_a_rerun_with_a_torn_samples_file_is_not_promoted(study, tmp_path, no_render, capsys):
    rerun, committed = finished_rerun(study, tmp_path / "rerun"), tmp_path / "committed"
    (committed / "runs" / "old-run").mkdir(parents=True)
    torn = next((rerun / "runs").glob("*/eval_samples/*.jsonl"))
    torn.write_text('{"id": "p", "correct": true}\n{"id": "q", "corr')
    before = snapshot(committed)
    refused(study, ["promote", "--rerun-root", rerun, "--root", committed, *(["--no-figures"] * (study == "mini"))],
            capsys, torn, "line 2")
    assert snapshot(committed) == before and sorted(p.name for p in tmp_path.iterdir()) == ["committed", "rerun"]


# --------------------------------------------------------------------------- item 4: answer kinds

def _samples(run: Path, *steps: int) -> None:
    for step in steps:
        path = run / "eval_samples" / f"step_{step:04d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"completion": "<SOLUTION>19</SOLUTION>", "gold": "19"}) + "\n")


@pytest.mark.parametrize("holds", ["extended", "real", "nothing"])
def test_answer_kinds_are_written_only_into_a_mini_study_root(holds, tmp_path, capsys):
    root = tmp_path / holds
    _samples(root / "runs" / "r1", 0, 60)
    if holds == "extended":
        (root / "study_plan.json").write_text('{"study": "extended"}')
    elif holds == "real":
        (root / "warmstart_build.json").write_text('{"paper_matched_alpha": 1.9}')
    refused("mini", ["answer-kinds", "--root", root], capsys, root)
    assert not (root / "answer_kinds.json").exists()


def test_answer_kinds_refuse_a_run_whose_first_or_last_evaluation_is_missing(tmp_path, capsys):
    root = tmp_path / "mini"
    write_plan(root, mini.study_plan())
    (root / "answer_kinds.json").write_text("{}\n")
    run = root / "runs" / "r1"
    _samples(run, 0, 20)  # the last, step 40, is missing: step 20 would pass for it
    (run / "config.json").write_text('{"steps": 40}')
    refused("mini", ["answer-kinds", "--root", root], capsys, run / "eval_samples" / "step_0040.jsonl")
    assert (root / "answer_kinds.json").read_text() == "{}\n"


# --------------------------------------------------------------------------- items 6, 7: arguments and wrong roots

@pytest.mark.parametrize("argv", [["verify", "--steps", "0"], ["run", "--steps", "-1"], ["check", "--check-steps", "0"],
                                  ["check", "--check-steps", "-3"]])
def test_real_study_refuses_steps_below_one_as_it_parses(argv, tmp_path, no_work, capsys):
    with pytest.raises(SystemExit) as stop:
        real_study.main([*argv, "--root", str(tmp_path / "r"), "--rerun-root", str(tmp_path / "rr")])
    assert stop.value.code == 2 and "not a positive integer" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_real_study_check_names_the_runs_when_the_run_is_not_one_before_building(no_work, capsys):
    refused("real_study", ["check", "--run", "nope"], capsys, "'nope' is not a run", "smollm2-135m-sa-a0.5-s0")


def _root_of(tmp_path: Path, study: str) -> Path:
    root = tmp_path / study
    (root / "runs").mkdir(parents=True)
    if study == "real":  # as a root written before the study had a plan
        (root / "warmstart_build.json").write_text('{"paper_matched_alpha": 1.9}')
    else:
        (root / "study_plan.json").write_text(json.dumps({"study": study}))
    return root


@pytest.mark.parametrize("study, argv, wrong", [
    ("real_study", ["check"], None), ("real_study", ["check"], "mini"), ("real_study", ["verify"], None),
    ("real_study", ["verify"], "extended"), ("real_study", ["run"], "mini"), ("mini", ["verify"], None),
    ("mini", ["verify"], "real"), ("mini", ["answer-kinds"], None), ("mini", ["run"], "extended"),
    ("extended", ["--verify"], None), ("extended", ["--verify"], "mini"), ("extended", [], "real")])
def test_a_missing_root_or_another_studys_is_an_error_naming_it(study, argv, wrong, tmp_path, no_work, capsys):
    root = _root_of(tmp_path, wrong) if wrong else tmp_path / "missing"
    before = snapshot(tmp_path)
    err = refused(study, [*argv, "--root", root, "--rerun-root", tmp_path / "rerun"], capsys, root)
    assert ("no such folder" in err) if wrong is None else (f"the {wrong} study's root" in err)
    assert snapshot(tmp_path) == before and not (tmp_path / "rerun").exists()


@pytest.mark.parametrize("study", ["mini", "real_study"])
def test_promote_refuses_a_missing_rerun_and_another_studys_committed_root(study, tmp_path, no_render, capsys):
    missing = tmp_path / "missing"
    refused(study, ["promote", "--rerun-root", missing, "--root", tmp_path / "committed"], capsys, missing)
    rerun, other = finished_rerun(study, tmp_path / "rerun"), _root_of(tmp_path, "extended")
    before = snapshot(other)
    refused(study, ["promote", "--rerun-root", rerun, "--root", other, "--no-figures"][:5 + (study == "mini")], capsys,
            other, "the extended study's root")
    assert snapshot(other) == before


# --------------------------------------------------------------------------- item 8: Ray after an interruption

AGENT = 'env -u RAY_AUTH_TOKEN_PATH sleep 120 & echo $!; wait'


def test_an_interrupted_command_leaves_ray_shut_down_and_no_process_of_its_start(tmp_path, monkeypatch, capsys):
    """Ctrl-C as Ray starts: ``ray.init`` has begun (an agent below a marked process, as the raylet's are, whose
    environment no longer shows the marker) when the interrupt comes.  The command ends with Ray shut down and
    the agent killed by the watchdog's sweep."""
    import ray

    state, started = {"up": False}, []

    def interrupted_init(**kwargs):
        state["up"] = True
        shell = subprocess.Popen(["sh", "-c", AGENT], stdout=subprocess.PIPE, text=True)  # carries the marker
        started.extend([psutil.Process(shell.pid), psutil.Process(int(shell.stdout.readline()))])
        raise KeyboardInterrupt

    monkeypatch.setattr(ray, "init", interrupted_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: state["up"])
    monkeypatch.setattr(ray, "shutdown", lambda: state.update(up=False))
    monkeypatch.setattr(real_study, "build_warm_start", lambda **kw: {"build_seconds": 1.0, "paper_matched_alpha": 1.9})
    try:
        with pytest.raises(SystemExit) as stop:
            real_study.main(["run", "--root", str(tmp_path / "real"), "--no-figures"])
        assert stop.value.code == 130 and not ray.is_initialized()
        gone, alive = psutil.wait_procs(started, timeout=10)
        assert len(started) == 2 and alive == [], f"left running: {alive}"
    finally:
        for proc in started:
            if proc.is_running():
                proc.kill()
