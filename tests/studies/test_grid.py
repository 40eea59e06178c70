"""The grid's plans and estimates, and the safety of its commands: what a rerun may delete, what exit status
a failed verdict gets, a GPU-style run executed as a notebook, a second run that trains nothing."""

import json

import pytest

from saah_lab.studies import mini
from saah_lab.studies.execution import grid
from saah_lab.studies.execution.runner import Plan, job_state, run_job, run_plan
from saah_lab.studies.execution.timing import Timings
from saah_lab.studies.plans import paper_plan
from saah_lab.studies.verify.bits import BITS_REPRODUCED
from saah_lib.paths import MINI_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import make_config


def test_plan_paper_lists_two_baselines_and_nine_runs_per_seed_with_the_papers_steps(tmp_path, capsys):
    plan = paper_plan(tmp_path, seeds=(0, 1))
    assert sorted(j.name for j in plan.jobs if j.kind == "baseline") == ["qwen2.5-1.5b-zero-shot",
                                                                         "qwen2.5-3b-zero-shot"]
    steps = {j.name: j.steps for j in plan.runs}
    assert len(steps) == 18
    # the paper: GRPO and AH-GRPO 150 steps, SA-AH-GRPO 180, the 1.5B AH alpha sweep 150 (alpha 0 and 0.5 are
    # the grpo and ah runs)
    for seed in (0, 1):
        for model in ("qwen2.5-1.5b", "qwen2.5-3b"):
            assert steps[f"{model}-grpo-a0-s{seed}"] == 150 and steps[f"{model}-ah-a0.5-s{seed}"] == 150
            assert steps[f"{model}-sa-a0.5-s{seed}"] == 180
        for alpha in ("-0.25", "0.1", "0.25"):
            assert steps[f"qwen2.5-1.5b-ah-a{alpha}-s{seed}"] == 150
    assert all(j.num_gpus == 1 and j.num_cpus >= 1 for j in plan.runs)

    assert grid.main(["plan", "paper", "--results-dir", str(tmp_path), "--step-seconds", "10", "--slots", "4"]) == 0
    out = capsys.readouterr().out
    # 4 x 150 + 180 (3B) and 150 + 150 + 180 + 3 x 150 (1.5B): 1410 steps x 10 s = 3.92 GPU-hours
    assert "9 runs to train, 1410 steps x 10 s per step = 3.92 h of GPU time = 3.92 GPU-hours" in out
    assert "per-step figure --step-seconds" in out and "pending" in out and "1 GPU" in out
    assert "9 runs (0 done, 0 partial, 9 pending), 2 baselines" in out


def test_plan_without_a_measured_step_time_says_how_to_measure_it(tmp_path):
    seconds, source = grid.step_seconds_source("qwen2.5-3b", True, None, bench_dir=tmp_path)
    assert (seconds, source) == (None, grid.UNMEASURED)
    (tmp_path / "h100-qwen2.5-3b.json").write_text(json.dumps({"steady_step_seconds": 7.5}))
    seconds, source = grid.step_seconds_source("qwen2.5-3b", True, None, bench_dir=tmp_path)
    assert seconds == 7.5 and source.endswith("h100-qwen2.5-3b.json")


def test_plan_reads_the_step_time_that_make_gpu_check_wrote_for_the_same_profile(tmp_path):
    (tmp_path / "h100-preflight.json").write_text(json.dumps({"profile": "qwen2.5-1.5b", "steady_step_seconds": 3.2}))
    assert grid.step_seconds_source("qwen2.5-1.5b", True, None, bench_dir=tmp_path)[0] == 3.2
    assert grid.step_seconds_source("qwen2.5-3b", True, None, bench_dir=tmp_path)[0] is None  # other profile


def test_plan_paper_takes_each_models_own_step_time_and_names_a_model_not_measured(tmp_path, capsys):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "h100-preflight.json").write_text(json.dumps({"profile": "qwen2.5-1.5b", "steady_step_seconds": 3.2}))
    root = ["plan", "paper", "--results-dir", str(tmp_path / "paper"), "--bench-dir", str(bench), "--slots", "8"]
    assert grid.main(root) == 0
    out = capsys.readouterr().out
    assert "1410 steps; seconds per step of qwen2.5-3b unmeasured: run `make gpu-check` first" in out

    (bench / "h100-qwen2.5-3b.json").write_text(json.dumps({"steady_step_seconds": 7.5}))
    assert grid.main(root) == 0
    out = capsys.readouterr().out
    # 930 steps of 1.5B (grpo 150, ah 150, sa 180, three alphas of 150) x 3.2 s + 480 of 3B x 7.5 s = 1.83 h;
    # 9 runs on 8 GPUs cannot end before the longest, a 3B sa run: 180 x 7.5 s = 0.375 h
    assert "(930 of qwen2.5-1.5b x 3.2 s, 480 of qwen2.5-3b x 7.5 s) = 1.83 h of GPU time = 1.83 GPU-hours" in out
    assert "0.38 h wall at 8 runs at a time (the longest run alone 0.38 h)" in out
    assert "qwen2.5-1.5b: measured: " in out and "h100-preflight.json; qwen2.5-3b: measured: " in out


def test_plan_mini_on_the_committed_results_says_every_run_is_done(capsys):
    assert grid.main(["plan", "mini"]) == 0
    out = capsys.readouterr().out
    assert "17 runs (17 done, 0 partial, 0 pending), 1 baselines, 1 warm starts" in out
    assert "estimate: 0 runs to train, 0 steps" in out


def test_plan_extended_says_what_the_studys_own_plan_said(tmp_path, capsys):
    """Its primary comparison, the alpha, the whole study's time and the projected MDE, beside the job list."""
    assert grid.main(["plan", "extended"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("primary comparison (fixed in advance): SA-AH-GRPO at the paper-matched alpha vs GRPO")
    assert "83 runs planned, 83 already complete, 0 to train" in out and "83 runs (83 done, 0 partial" in out
    assert "estimated wall time of the whole study: " in out
    assert "projected minimum detectable final Pass@1 difference" in out and "results/mini" in out

    assert grid.main(["plan", "extended", "--results-dir", str(tmp_path), "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "paper-matched alpha: not measured yet" in out and "over 2 seed pairs (1 seeds x 2 warm starts)" in out
    assert "11 runs planned, 0 already complete, 11 to train" in out and "11 runs (0 done, 0 partial, 11 pending)" in out


def test_a_partial_run_is_listed_with_its_last_step(tmp_path, run_maker):
    run_maker(tmp_path, "tiny-sa-a0.5-s0", "tiny", "sa", 0.5, 0, steps=4, eval_every=2)
    # the same run id planned for 8 steps (named: a default id would say -steps8)
    cfg = make_config("tiny", method="sa", alpha=0.5, seed=0, max_steps=8, results_dir=str(tmp_path),
                      run_id="tiny-sa-a0.5-s0")
    assert job_state(run_job(cfg)) == ("partial", 4)
    assert job_state(run_job(make_config("tiny", method="sa", alpha=0.5, seed=0, max_steps=4, run_id="tiny-sa-a0.5-s0",
                                         results_dir=str(tmp_path)))) == ("done", None)


@pytest.mark.parametrize("holds", ["a user file", "results"])
def test_verify_never_clears_a_rerun_root_it_did_not_create(tmp_path, holds, capsys):
    rerun = tmp_path / "rerun"
    if holds == "results":  # --rerun-root results: a folder of studies, no rerun marker
        (rerun / "mini" / "runs").mkdir(parents=True)
        (rerun / "extended").mkdir()
    else:
        rerun.mkdir()
        (rerun / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(rerun) for p in rerun.rglob("*"))
    with pytest.raises(SystemExit) as stop:
        mini.main(["verify", "--root", str(MINI_ROOT), "--rerun-root", str(rerun)])
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert f"the rerun root {rerun} holds" in err and "nothing was deleted" in err
    assert ("notes.txt" in err) if holds != "results" else ("extended, mini" in err)
    assert sorted(p.relative_to(rerun) for p in rerun.rglob("*")) == before


def test_a_mini_root_that_grid_run_creates_is_marked_as_a_rerun(tmp_path, monkeypatch):
    from saah_lab.studies.execution import runner

    monkeypatch.setattr(runner, "run_tasks", lambda tasks, **kw: {})  # nothing trains here
    plan = mini.make_plan(tmp_path / "fresh", seeds=(0,)).only(["tiny-grpo-a0-s0"])
    grid.run_study(plan, address=None, max_retries=1, step_seconds=None, slots=1)
    mini.check_rerun_root(tmp_path / "fresh")  # `mini verify --rerun-root` may clear it


def test_a_marked_earlier_rerun_is_cleared(tmp_path):
    rerun = tmp_path / "rerun"
    (rerun / "runs" / "old").mkdir(parents=True)
    (rerun / mini.RERUN_MARKER).write_text(json.dumps({"study": "mini"}))
    mini.clear_rerun_root(rerun)
    assert list(rerun.iterdir()) == []
    (rerun / mini.RERUN_MARKER).write_text(json.dumps({"study": "extended"}))  # another study's rerun
    with pytest.raises(mini.NotARerunRoot):
        mini.clear_rerun_root(rerun)


@pytest.mark.parametrize("outcome, status", [("bits reproduced", 0), ("conclusions differ", 1)])
def test_verify_exits_with_its_verdicts_status(monkeypatch, tmp_path, outcome, status, capsys):
    report = {"outcome": BITS_REPRODUCED if status == 0 else "conclusions differ", "verdict": outcome,
              "runs_compared": 17, "runs_identical": 17 if status == 0 else 0}
    monkeypatch.setattr(mini, "rerun_and_verify", lambda *a, **k: report)
    assert mini.main(["verify", "--rerun-root", str(tmp_path / "r")]) == status
    assert ("FAILED" in capsys.readouterr().out) == (status == 1)


def test_grid_commands_exit_non_zero_on_a_bad_plan(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        grid.main(["plan", "paper", "--results-dir", str(tmp_path), "--runs", "no-such-run"])
    assert stop.value.code == 2 and "no-such-run, not in the paper plan" in capsys.readouterr().err


@pytest.mark.slow
def test_a_gpu_style_run_takes_the_cpu_runs_path_and_a_second_run_trains_nothing(tiny_random_model_dir, tmp_path,
                                                                           monkeypatch):
    from saah_lab.studies.execution import engine

    cfg = make_config("tiny", model_name=str(tiny_random_model_dir), method="sa", alpha=0.5, seed=0, max_steps=2,
                      n_train=8, n_eval=2, max_completion_length=8, eval_max_new_tokens=8, eval_batch_size=2,
                      eval_every=1, save_steps=1, results_dir=str(tmp_path))
    plan = Plan("gpu-style", tmp_path, [run_job(cfg, gpu=True, cpus_per_gpu_run=1)])
    real = engine.run_tasks
    monkeypatch.setattr(engine, "run_tasks", lambda tasks, **kw: real(tasks, num_gpus=1, **kw))  # a declared GPU
    monkeypatch.setattr("saah_lab.studies.execution.runner.run_tasks", engine.run_tasks)
    [entry] = run_plan(plan, Timings(tmp_path / "timings.json"))
    assert RunDir(cfg.run_dir).is_complete(2)
    assert not (cfg.run_dir / "02_train.ipynb").exists()  # the run function, with the plan's config: no notebook
    assert entry["cuda_visible_devices"] is not None  # the engine gave the task its (declared) GPU
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    assert grid.run_study(plan, address=None, max_retries=1, step_seconds=None, slots=1) == []
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_worker_that_cannot_see_the_results_root_says_so(tmp_path):
    from saah_lab.studies.execution.runner import warm_start_task

    with pytest.raises(FileNotFoundError, match=r"results root .*elsewhere is not visible on node .*shared filesystem"):
        warm_start_task(0, str(tmp_path / "elsewhere"))


def test_grid_run_exits_non_zero_naming_the_failed_run_its_node_and_log(tmp_path, monkeypatch, capsys):
    from saah_lab.studies.execution import runner
    from saah_lab.studies.execution.engine import TaskFailed

    def failing(tasks, **kw):
        raise TaskFailed("run:tiny-sa-a0.5-s0", "10.0.0.7", "/tmp/ray/logs/worker-1.err", "RuntimeError: boom")

    monkeypatch.setattr(runner, "run_tasks", failing)
    with pytest.raises(SystemExit) as stop:
        grid.main(["run", "ablation", "--alphas", "0.5", "--method", "sa", "--results-dir", str(tmp_path)])
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "run:tiny-sa-a0.5-s0 failed on node 10.0.0.7" in err and "/tmp/ray/logs/worker-1.err" in err
    assert "RuntimeError: boom" in err


def _root_with_a_run_trained_otherwise(tmp_path):
    """A copy of a committed mini run under its planned id, its config.json saying it was trained with another
    learning rate and training-set size (issue 39, item 5)."""
    import shutil

    run = tmp_path / "root" / "runs" / "tiny-sa-a0.5-s0"
    shutil.copytree(MINI_ROOT / "runs" / run.name, run)
    config = json.loads((run / "config.json").read_text())
    config.update(learning_rate=config["learning_rate"] * 2, n_train=config["n_train"] // 2)
    (run / "config.json").write_text(json.dumps(config))
    return tmp_path / "root", config


def test_plan_shows_a_complete_run_trained_with_other_settings_as_not_the_planned_one(tmp_path, capsys):
    root, config = _root_with_a_run_trained_otherwise(tmp_path)
    assert grid.main(["plan", "mini", "--results-dir", str(root), "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[2] for line in out.splitlines() if "tiny-sa-a0.5-s0 " in line] == ["OTHER"]
    assert (f"tiny-sa-a0.5-s0: {root / 'runs' / 'tiny-sa-a0.5-s0' / 'config.json'} records learning_rate: "
            f"{config['learning_rate']!r} -> {config['learning_rate'] / 2!r}, n_train: {config['n_train']!r} -> "
            f"{config['n_train'] * 2!r}") in out


def test_run_refuses_a_plan_whose_run_folder_holds_another_run_before_writing_anything(tmp_path, monkeypatch,
                                                                                     capsys):
    from saah_lab.studies.execution import runner

    monkeypatch.setattr(runner, "run_tasks", lambda tasks, **kw: {})  # nothing may train here
    root, _ = _root_with_a_run_trained_otherwise(tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as stop:
        grid.main(["run", "mini", "--results-dir", str(root), "--seeds", "0", "--runs", "tiny-sa-a0.5-s0"])
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "hold runs trained with other settings than planned" in err and "learning_rate" in err and "n_train" in err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # no lock, marker or timings file


# every option acts or is refused, before anything is written (issue 39, items 7, 8, 11, 12)


def test_steps_reach_the_paper_study_for_a_smoke_test(tmp_path, capsys):
    assert grid.main(["plan", "paper", "--results-dir", str(tmp_path), "--steps", "2", "--step-seconds", "10"]) == 0
    out = capsys.readouterr().out
    assert "9 runs to train, 18 steps x 10 s per step" in out and "qwen2.5-1.5b-sa-a0.5-s0-steps2 " in out


@pytest.mark.parametrize("argv, error", [
    (["plan", "mini", "--alphas", "0.5"], "--alphas: options of the ablation study only"),
    (["plan", "paper", "--method", "sa", "--profile", "tiny"], "--profile, --method: options of the ablation study"),
    (["plan", "ablation", "--seeds", "3", "4"], "the ablation trains one seed"),
    (["plan", "paper", "--seeds", "1", "1"], "--seeds repeats 1"),
    (["plan", "ablation", "--alphas", "0.5", "0.5"], "--alphas repeats 0.5"),
    (["plan", "paper", "--step-seconds", "0"], "--step-seconds 0.0 is not a step time"),
    (["plan", "paper", "--step-seconds", "-1"], "--step-seconds -1.0 is not a step time"),
    (["plan", "paper", "--step-seconds", "nan"], "--step-seconds nan is not a step time"),
    (["plan", "paper", "--step-seconds", "inf"], "--step-seconds inf is not a step time"),
    (["plan", "paper", "--slots", "-3"], "--slots -3: at least 1"),
    (["plan", "paper", "--slots", "0"], "--slots 0: at least 1"),
    (["run", "ablation", "--alphas", "0.5", "--max-retries", "-1"], "--max-retries -1: 0 (never retry) or more"),
    (["run", "ablation", "--alphas", "0.5", "--address", "nope"], "--address 'nope': expected auto or host:port"),
    (["run", "ablation", "--alphas", "0.5", "--address", "127.0.0.1:1"], "--address 127.0.0.1:1: no Ray head answers"),
    (["plan", "paper", "--bench-dir", "{tmp}/no-such-folder"], "no-such-folder is not a folder"),
])
def test_an_option_that_would_not_act_is_refused_before_anything_is_written(argv, error, tmp_path, monkeypatch,
                                                                             capsys):
    from saah_lab.studies.execution import runner

    def would_train(tasks, **kw):
        raise AssertionError("the grid started its tasks")

    monkeypatch.setattr(runner, "run_tasks", would_train)  # nothing may train, nor wait for a cluster, here
    root = tmp_path / "root"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--results-dir", str(root)]
    with pytest.raises(SystemExit) as stop:
        grid.main(argv)
    assert stop.value.code == 2 and error in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []  # no root, lock, marker or timings file


def test_a_results_dir_that_is_a_file_is_an_error_saying_so(tmp_path, monkeypatch, capsys):
    from saah_lab.studies.execution import runner

    monkeypatch.setattr(runner, "run_tasks", lambda tasks, **kw: {})  # nothing may train here
    (tmp_path / "file").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        grid.main(["run", "ablation", "--alphas", "0.5", "--results-dir", str(tmp_path / "file" / "root")])
    assert stop.value.code == 2
    assert f"{tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("content, error", [
    ('{"steady_step_seconds": NaN}', "steady_step_seconds nan is not a step time"),
    ('{"steady_step_seconds": -3.5}', "steady_step_seconds -3.5 is not a step time"),
    ('{"steady_step_seconds": 1e308}', "is not a step time"),
    ('{"steady_step_seconds": true}', "steady_step_seconds True is not a number of seconds"),
    ('{"variants": [{"trainer": "ours", "median_step_s": "fast"}]}', "median_step_s 'fast' is not a number"),
    ('{"profile": "qwen2.5-1.5b", "steady_step_sec', "cannot be read"),
    ("[1, 2]", "holds a list, not a JSON object"),
])
def test_a_benchmark_file_that_gives_no_step_time_is_an_error_naming_it(tmp_path, content, error, capsys):
    bench = tmp_path / "bench"
    bench.mkdir()
    name = "h100-preflight.json" if "profile" in content else "h100-qwen2.5-1.5b.json"
    (bench / name).write_text(content)
    with pytest.raises(SystemExit) as stop:
        grid.main(["plan", "paper", "--results-dir", str(tmp_path / "paper"), "--bench-dir", str(bench)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"benchmark file {bench / name}" in err and error in err


@pytest.fixture
def listener():
    """A local port that accepts connections; ``answer`` (bytes) is what it sends back, after reading a little."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held, reply = [], {"answer": None}

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            connection.recv(64)
            if reply["answer"]:
                connection.sendall(reply["answer"])

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], reply
    server.close()
    for connection in held:
        connection.close()


def test_an_address_that_does_not_answer_is_given_up_after_the_timeout(listener):
    import time

    port, _ = listener
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"--address 127.0.0.1:{port}: no Ray head answers there within 0.5 s "
                                         r"\(.*timed out"):
        grid.check_address(f"127.0.0.1:{port}", timeout=0.5)  # accepts, says nothing: a hung or foreign server
    assert time.perf_counter() - start < 5


def test_an_address_where_a_grpc_server_answers_is_taken(listener):
    port, reply = listener
    reply["answer"] = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an HTTP/2 SETTINGS frame, as gRPC servers answer
    grid.check_address(f"127.0.0.1:{port}", timeout=5)
    grid.check_address(f"ray://127.0.0.1:{port}", timeout=5)


def test_a_finished_confirm_rerun_is_compared_with_the_committed_study(tmp_path, monkeypatch, capsys):
    from saah_lab.studies import confirm

    plan = confirm.make_plan(tmp_path / "rerun")
    seen = {}

    def compare(committed, root, run_ids, conclusions, study_files):
        seen.update(committed=committed, root=root, runs=len(run_ids), conclusions=conclusions)
        return {"outcome": "conclusions reproduced", "verdict": "bits differ on 90/90 runs; conclusions reproduced",
                "runs_compared": 90, "runs_identical": 0, "conclusions": {"line": "conclusions reproduced: ..."}}

    monkeypatch.setattr(grid, "compare_studies", compare)
    monkeypatch.setattr(grid, "write_report", lambda report, root: (root / "reproduction.json", None))
    intel = {"mode": "pinned", "pin_holds": True, "mkl_kernels": "Intel", "cpu_vendor": "GenuineIntel"}
    monkeypatch.setattr(grid, "cpu_numerics_record", lambda: intel)
    # the committed confirmatory study ran MKL's Intel kernels: on an Intel CPU its bits must match
    assert grid.verify_rerun(plan, confirm.CONFIRM_ROOT, confirm.study_conclusions) == 1
    assert seen["committed"] == confirm.CONFIRM_ROOT and seen["runs"] == 90
    assert seen["conclusions"] is confirm.study_conclusions
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith("bits: 90/90 runs differ") and out[-1].startswith("FAILED: bits differ although")
    monkeypatch.setattr(grid, "cpu_numerics_record", lambda: {**intel, "mkl_kernels": "generic"})
    assert grid.verify_rerun(plan, confirm.CONFIRM_ROOT, confirm.study_conclusions) == 0  # an AMD CPU: level 2
