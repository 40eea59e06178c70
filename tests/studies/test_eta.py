"""The study runner's ETA against a simulated schedule whose end is known: a fresh clone's make mini (a
warm-start build beside 17 runs, two slots) and a plan of runs only, at one and at two slots."""

import json
import random

import pytest

from saah_lab.studies.execution import runner
from saah_lab.studies.execution.runner import Job, Plan, build_seconds_left, eta_seconds, progress_writer, run_plan
from saah_lab.studies.execution.timing import Timings
from saah_lib.rundir import layout


def test_the_jobs_left_are_scheduled_on_the_slot_that_frees_first():
    assert eta_seconds([10, 10, 10, 10], slots=2) == 20
    assert eta_seconds([10, 10, 10, 10], slots=8) == 10  # four jobs fill four slots at most
    assert eta_seconds([100, 1, 1], slots=2) == 100  # the long job alone
    assert eta_seconds([10, 10, 10], slots=2) == 20  # the third runs alone: not 15
    assert eta_seconds([5, 10, 10], slots=2) == 15  # the running job with 5 s left frees its slot first
    assert eta_seconds([0, -1], slots=2) == eta_seconds([], slots=2) == 0


def simulate(durations: dict[str, float], steps: dict[str, int], slots: int):
    """List scheduling in order: yields (finish time, finished job, the ETA the runner would print then, the
    time truly left).  At each finish the runner sees what this simulation writes: a run's logged steps (its
    progress so far, whole steps), the build's pace, and the finished runs' own times."""
    order, running, clock, done = list(durations), {}, 0.0, {}
    while order or running:
        while order and len(running) < slots:
            job = order.pop(0)
            running[job] = clock
        job = min(running, key=lambda j: running[j] + durations[j])
        clock = running.pop(job) + durations[job]
        done[job] = clock
        yield clock, job, dict(running), dict(done)


def eta_at(clock, running, done, durations, steps, slots, pending):
    """The runner's estimate from what it can observe at ``clock``."""
    trained = [j for j in done if j in steps]
    per_step = sum(durations[j] for j in trained) / sum(steps[j] for j in trained)
    work = []  # the running jobs first, as the runner orders them
    for job, started in running.items():
        fraction = (clock - started) / durations[job]
        if job in steps:
            logged = int(fraction * steps[job])
            work.append((steps[job] - logged) * per_step)
        else:  # the build's progress file: its pace so far
            elapsed = clock - started
            work.append(elapsed / fraction * (1 - fraction) if fraction > 0 else durations[job])
    work += [steps[j] * per_step for j in pending]
    return eta_seconds(work, slots)


@pytest.mark.parametrize("build, slots", [(275.0, 2), (None, 2), (None, 1)])
def test_the_eta_is_within_ten_percent_of_the_truth_from_the_first_line(build, slots):
    rng = random.Random(0)
    runs = {f"run{i}": 42.0 * rng.uniform(0.93, 1.07) for i in range(17)}
    durations = {**({"build": build} if build else {}), **runs}
    steps = {j: 60 for j in runs}
    events = list(simulate(durations, steps, slots))
    finish = events[-1][0]
    checked = 0
    for clock, job, running, done in events:
        pending = [j for j in durations if j not in running and j not in done]
        if job not in steps or finish - clock < 60:  # the last minute: a few seconds off is a large share
            continue
        eta = eta_at(clock, running, done, durations, steps, slots, pending)
        assert abs(eta - (finish - clock)) <= 0.10 * (finish - clock), (clock, job, eta, finish - clock)
        checked += 1
    assert checked >= 5


def test_the_former_estimate_fails_the_same_check():
    """elapsed / steps done x steps left (the runner's estimate before) counts two slots' time as one's."""
    runs = {f"run{i}": 42.0 for i in range(17)}
    events = list(simulate(runs, {j: 60 for j in runs}, 2))
    finish = events[-1][0]
    clock, _, _, done = events[0]
    former = clock / (60 * len(done)) * 60 * (17 - len(done))
    assert abs(former - (finish - clock)) > 0.10 * (finish - clock)


def test_a_builds_progress_file_gives_its_time_left_by_its_pace(tmp_path):
    path = tmp_path / "progress.json"
    assert build_seconds_left(path) is None  # none yet
    on_step = progress_writer(path, every_s=0.0)
    on_step(240, 2400)
    record = json.loads(path.read_text())
    assert (record["done"], record["total"]) == (240, 2400)
    assert build_seconds_left(path) == pytest.approx(record["elapsed_s"] * 9)
    path.write_text("{torn")
    assert build_seconds_left(path) is None


def test_run_plan_prints_the_eta_of_the_runs_left_and_the_build_beside_them(tmp_path, monkeypatch, capsys):
    """The driver's wiring, with a fake engine: two slots, a build beside four 10-step runs; the build's
    progress file says 100 s left; the first run took 20 s (2 s a step), the second has logged 5 of its 10 steps.
    Left: the build 100 s and the second run 10 s on the two slots, then the other two runs (20 s each) after
    the second: done when the build is, in 100 s."""
    root = tmp_path / "root"
    runs = [Job.of("run", f"r{i}", dict, {"config": {"profile": "tiny"}}, steps=10, folder=root / "runs" / f"r{i}")
            for i in range(4)]
    build = Job.of("warmstart", "tiny-warmstart", dict, {"seed": 0, "root": str(root)}, folder=tmp_path / "build")
    progress = tmp_path / "build-progress.json"
    progress.write_text(json.dumps({"done": 1200, "total": 2400, "elapsed_s": 100.0}))
    half_done = runs[1].folder / layout.TRAIN_LOG_FILE

    def fake_run_tasks(tasks, on_finish, **_):
        half_done.parent.mkdir(parents=True)
        half_done.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 6)))
        first_run = next(t for t in tasks if t.id == "run:r0")
        on_finish(first_run, {"run_id": "r0", "wall_s": 20.0, "peak_rss_mb": 1.0}, "node")

    monkeypatch.setattr(runner, "run_tasks", fake_run_tasks)
    monkeypatch.setattr(runner, "job_state", lambda job: ("pending", 0))
    monkeypatch.setattr(runner, "build_progress_file", lambda seed: progress)
    run_plan(Plan("fake", root, [build, *runs]), Timings(root / "timings.json"), slots=2)
    out = capsys.readouterr().out
    assert "warm start: building beside the runs, a check of the copy they load; a line when done" in out
    assert "[1/4] r0: 20 s, 1 MB (node node); 3 pending, ETA 01:40" in out
