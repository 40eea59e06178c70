"""Host syncs and eager ops per token of the compiled rollout engine at an earlier commit.

    python -m bench.profile_rollout_before [--commit 8511080] [--out FILE]

Takes ``saah_lib/models/rollout.py`` from ``--commit`` (git), adds the ``rollout.decode`` profiler
region around its decode loop (two lines, nothing else changes), compiles its decode step with the
``eager`` backend, and counts one rollout of the tiny warm start with
``bench.profiling.count_ops``: the workload (16 prompts of 192 tokens, 96 new tokens forced
to full length, the end-of-sequence token live) and the counting of ``python -m bench.step
--profile tiny --rollout-profile``, so the two are comparable.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from bench.models import prompts_dataset
from bench.profiling import count_ops
from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.models.names import TINY_WARMSTART
from saah_lib.paths import REPO_ROOT

LOOP = "        steps_run = 0\n        for t in range(self.max_new_tokens):"
END = "        tokens, logps = tokens[:, :steps_run].cpu(), logps[:, :steps_run].cpu()"


def old_engine_module(commit: str):
    source = subprocess.run(["git", "show", f"{commit}:saah_lib/models/rollout.py"], cwd=REPO_ROOT, check=True,
                            capture_output=True, text=True).stdout
    if LOOP not in source or END not in source:
        raise SystemExit(f"saah_lib/models/rollout.py at {commit} is not the engine this script instruments")
    source = source.replace(LOOP, "        region = torch.profiler.record_function('rollout.decode')\n"
                                  "        region.__enter__()\n" + LOOP)
    source = source.replace(END, "        region.__exit__(None, None, None)\n"
                                 "        self.steps_run = steps_run\n" + END)
    path = Path(tempfile.mkdtemp()) / "rollout_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("rollout_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.profile_rollout_before", description=__doc__.splitlines()[0])
    p.add_argument("--commit", default="8511080")
    p.add_argument("--out", default=None, help="also write the counts to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    old = old_engine_module(args.commit)
    model, tok = load_model_and_tokenizer(resolve_model(TINY_WARMSTART, progress=False))
    model.eval()
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts_dataset(16, tok, 192)["prompt"]]
    engine = old.StaticRollout(max_new_tokens=96, pad_token_id=tok.pad_token_id, eos_token_ids=[tok.eos_token_id],
                               compile=True)
    engine._compiled_step = torch.compile(engine._step, backend="eager", dynamic=False)  # as compile=True, on CPU
    sampling = old.SamplingSettings(temperature=1.0, min_new_tokens=96)
    engine.generate(model, prompts, sampling)  # compiles
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.generate(model, prompts, sampling)
    events = prof.events()
    command = "python -m bench.profile_rollout_before " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"commit": args.commit, "completions": 16, "prompt_tokens": 192, "new_tokens": 96,
              "compile_backend": "eager",
              "command": command.strip(), **count_ops(events, engine.steps_run),
              "whole_call": count_ops(events, engine.steps_run, region=None)}
    print(json.dumps({k: v for k, v in result.items() if "by_name" not in k and k != "whole_call"}))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
