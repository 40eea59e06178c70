# Two commands do everything on a fresh machine:
#   make mini   reruns the CPU mini study (warm start, baseline, paper-matched alpha, grpo/ah/sa x 3 seeds,
#               alpha sweep, tables, figures) into results/rerun/mini and checks it against the committed results/mini
#   make test   the test suite
# Everything runs offline; nothing here needs a GPU or a model hub.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONUNBUFFERED := 1

.PHONY: setup test mini mini-promote extended extended-plan figures paper bench latex

setup: $(STAMP)

# torch is installed first and pinned: an unpinned torch would pull several GB of CUDA wheels.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (saah)" >/dev/null
	touch $(STAMP)

# Non-fatal: without root or apt the PDF test skips and `make paper` says what to install.
latex:
	-bash tools/install_latex.sh

test: setup latex
	$(PY) -m pytest -q

mini: setup
	$(PY) -m saah_lib.studies.mini verify

# Explicit: replace the committed study by the last finished `make mini` rerun, then redraw its tables and figures.
mini-promote: setup
	$(PY) -m saah_lib.studies.mini promote

# The powered CPU study into results/extended (about 60 min on 2 cores): SA-AH-GRPO vs GRPO at the
# paper-matched alpha (its primary comparison) over 10 seeds from each of two warm starts, AH-GRPO at that
# alpha, SA-AH-GRPO at the main alpha, the top-K runs and measurement. EXTENDED_ARGS passes options
# (e.g. EXTENDED_ARGS="--seeds 0 1 2 3 4"); `make extended-plan` prints the runs and the time estimate.
extended: setup
	$(PY) -m saah_lib.studies.extended $(EXTENDED_ARGS)

extended-plan: setup
	$(PY) -m saah_lib.studies.extended --plan $(EXTENDED_ARGS)

# The committed results are checked against their MANIFEST.json first: a hand-edited or damaged
# log stops here, named, before it reaches a table (`make paper` builds on this target).
figures: setup
	$(PY) -m saah_lib.rundir.manifest check $(wildcard results/mini results/extended results/paper_reported)
	$(PY) -m papermill -k python3 --log-level WARNING notebooks/04_figures.ipynb results/04_figures.out.ipynb

paper: figures latex
	cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error main.tex >/dev/null && echo "wrote paper/main.pdf"

bench: setup
	$(PY) -m saah_lib.studies.bench --profile tiny
