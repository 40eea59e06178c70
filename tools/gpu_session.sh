#!/usr/bin/env bash
# One GPU session in one call, on a bare GPU machine without network: install the carried wheels, run
# `make gpu-bench` for the 1.5B profile, then the 3B preflight if time remains. Run from the repository root:
#   bash tools/gpu_session.sh
#
# The machine is expected to have Python 3.12 with torch (CUDA), accelerate, numpy, pandas, pyarrow,
# huggingface_hub, safetensors, psutil, pyyaml, tqdm, requests, filelock and regex, and no trl. The wheels of the
# pinned trl, transformers, peft, datasets, tokenizers and what datasets needs besides (dill, multiprocess, fsspec,
# xxhash) travel in .whl/ (git-ignored); make them on a machine with network (docs/gpu.md, "One call"):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       trl==1.16.0 transformers==5.23.0 peft==0.21.2 datasets==5.2.0 tokenizers==0.23.3 dill multiprocess fsspec xxhash
# They go into a folder of their own (/tmp/site), first on PYTHONPATH, so the machine's own packages stay as they are.
#
# Every step runs under `timeout`, so the whole ends within SESSION_BUDGET_S; each writes its JSON as it goes, so a
# step cut off keeps what it measured. Everything lands in $OUT: the JSON files, a log per step, session.txt.
# Settings (environment):
#   OUT                  where to write (default: results/local/gpu-session, git-ignored)
#   SESSION_BUDGET_S     seconds for the whole session (default: 540, inside a 10-minute call)
#   GPU_BENCH_BUDGET_S   the benchmark's --time-budget-s (default: 330; it shortens or skips its later parts to fit)
#   PREFLIGHT_MIN_S      the preflight runs only with at least this many seconds left (default: 90)
#   GPU_BENCH_ARGS       the benchmark's options (default: --profile qwen2.5-1.5b)
#   PREFLIGHT_ARGS       the preflight's (default: --profile qwen2.5-3b --prompts 16 --eval-problems 128 --step-steps 8)
#   PYTHON               the interpreter (default: python3)
set -uo pipefail

OUT=${OUT:-results/local/gpu-session}
SESSION_BUDGET_S=${SESSION_BUDGET_S:-540}
GPU_BENCH_BUDGET_S=${GPU_BENCH_BUDGET_S:-330}
PREFLIGHT_MIN_S=${PREFLIGHT_MIN_S:-90}
GPU_BENCH_ARGS=${GPU_BENCH_ARGS:---profile qwen2.5-1.5b}
PREFLIGHT_ARGS=${PREFLIGHT_ARGS:---profile qwen2.5-3b --prompts 16 --eval-problems 128 --step-steps 8}
PYTHON=${PYTHON:-python3}
SITE=/tmp/site
# the benchmark's own budget does not cover the interpreter's start and its last step: this much more before the kill
GRACE_S=60
mkdir -p "$OUT"
SECONDS=0

left() { echo $((SESSION_BUDGET_S - SECONDS)); }
note() { echo "gpu_session [${SECONDS}s]: $*" | tee -a "$OUT/session.txt"; }

# ---------------------------------------------------------------- packages
if "$PYTHON" -c "import trl" 2>/dev/null; then
    note "trl importable already: nothing installed"
elif compgen -G ".whl/*.whl" >/dev/null; then
    note "installing $(ls .whl/*.whl | wc -l) wheels into $SITE"
    "$PYTHON" -m pip install -q --no-deps --no-index --no-compile --disable-pip-version-check --target "$SITE" \
        .whl/*.whl 2>&1 | tail -5 | tee -a "$OUT/session.txt"
else
    note "no trl and no .whl/*.whl to install it from: carry .whl (see the top of this script)"
    exit 2
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
export PYTHONWARNINGS="ignore:\`is_gradient_checkpointing\` is deprecated:FutureWarning"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    # the versions from the packages' metadata: importing them here would cost the benchmark seconds
    "$PYTHON" -c "import importlib.metadata as m, sys
print('python', sys.version.split()[0], *(f'| {p} {m.version(p)}' for p in
      ('torch', 'transformers', 'trl', 'peft', 'accelerate', 'datasets', 'tokenizers')))" 2>&1
} | tee -a "$OUT/session.txt"

# ---------------------------------------------------------------- the benchmark: stock TRL against ours (1.5B)
budget=$(( $(left) - GRACE_S < GPU_BENCH_BUDGET_S ? $(left) - GRACE_S : GPU_BENCH_BUDGET_S ))
note "gpu-bench $GPU_BENCH_ARGS, budget ${budget}s, killed after $((budget + GRACE_S))s"
# shellcheck disable=SC2086  # the options are words
timeout -k 10 $((budget + GRACE_S)) "$PYTHON" -m bench.gpu $GPU_BENCH_ARGS \
    --time-budget-s "$budget" --out "$OUT" >"$OUT/gpu-bench.log" 2>&1
note "gpu-bench exit status $? (124: cut off)"
tail -8 "$OUT/gpu-bench.log"

# ---------------------------------------------------------------- the preflight (3B), if time remains
if (( $(left) >= PREFLIGHT_MIN_S )); then
    note "preflight $PREFLIGHT_ARGS, killed after $(( $(left) - 5 ))s"
    # shellcheck disable=SC2086
    timeout -k 5 $(( $(left) - 5 )) "$PYTHON" -m bench.preflight $PREFLIGHT_ARGS --out "$OUT" \
        >"$OUT/preflight.log" 2>&1
    note "preflight exit status $? (1: not ready; 124: cut off by the session's budget)"
    tail -8 "$OUT/preflight.log"
else
    note "preflight skipped: $(left)s left, it needs at least ${PREFLIGHT_MIN_S}s"
fi
find "$OUT" -mindepth 1 -type d -empty -delete  # the trainers' empty output folders
note "done; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
