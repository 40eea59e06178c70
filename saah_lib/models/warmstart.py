"""The tiny model's supervised warm start, built once and cached: :func:`build_warm_start`.

On one CPU core it builds (its time is ``build_seconds`` in the record beside it,
``results/warm_starts/tiny-warmstart/build.json``), into the git-ignored :data:`saah_lib.paths.TINY_WARMSTART_DIR`, a
model folder that GRPO can train on :mod:`saah_lib.tasks.synthetic` problems: the tokenizer and model of
:mod:`saah_lib.models.tiny`, fine-tuned on reference solutions with two planted habits that the reward penalises and
GRPO can unlearn (:func:`saah_lib.models.warmstart_targets.sft_targets`), which leaves Pass@1 headroom
(``heldout_pass_at_1`` in the same record).

The folder is cached (``build.json`` records seed, settings and recipe version) and built atomically. ``files.json``
records the size and sha256 of every file the build wrote; each use checks them (:func:`cache_problem`), so a damaged
cache, or one without ``files.json``, is rebuilt with a message saying what was wrong, never used. Staging folders
that killed builds left behind are removed by the next call (:func:`remove_dead_staging`).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from tokenizers import Tokenizer

from saah_lib.jsonio import atomic_write_json, read_json, read_text, sha256_of
from saah_lib.models.evaluate import evaluate_pass_at_1
from saah_lib.models.tiny import CHAT_ROLES, build_tokenizer, init_tiny_model, parameter_count
from saah_lib.models.warmstart_targets import PLAIN_ANSWER, sft_targets
from saah_lib.numerics import RECORD_KEY, cpu_description, cpu_numerics_record, mkl_kernels
from saah_lib.paths import TINY_WARMSTART_DIR, repo_relative
from saah_lib.progress import ProgressLines, bar, say
from saah_lib.tasks.problems import Problem
from saah_lib.tasks.prompts import SYSTEM_PROMPT, make_prompt
from saah_lib.tasks.synthetic import (
    DEFAULT_MAX_RESULT,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_VALUE,
    DEFAULT_MIN_STEPS,
    generate_problems,
)

BUILD_INFO_FILE = "build.json"
# size and sha256 of every other file of the build, written just before build.json
FILES_RECORD = "files.json"
# what loading the model and its tokenizer needs (the build writes a few more, all recorded)
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
EMBEDDINGS = "model.embed_tokens.weight"
# Bump when the build recipe changes in a way the settings do not capture.
WARMSTART_VERSION = 2
# The build runs on one thread: for a model this small a second thread gains little, costs a many-fold slowdown
# whenever another process holds the other core (threads spin waiting for each other), and one thread makes the
# floating-point results, hence the saved weights, reproducible.
BUILD_THREADS = 1
# Separate seed streams, so the warm start never trains on the problems that synthetic_split(seed) hands to GRPO,
# and measures on fresh ones.
SFT_SEED_OFFSET = 10_000
HELDOUT_SEED_OFFSET = 20_000
TOKENIZER_SEED_OFFSET = 30_000


@dataclass(frozen=True)
class WarmStartSettings:
    """Everything that determines a warm-start build besides the seed."""

    # model (Qwen2 layout, grouped-query attention: 8 query heads of width 16 share 4 key/value heads)
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 8
    num_kv_heads: int = 4
    intermediate_size: int = 512
    max_positions: int = 384
    # tokenizer: corpus words seen at least this often become single tokens
    tokenizer_problems: int = 3000
    min_word_count: int = 2
    # task
    min_steps: int = DEFAULT_MIN_STEPS
    max_steps: int = DEFAULT_MAX_STEPS
    max_value: int = DEFAULT_MAX_VALUE
    max_result: int = DEFAULT_MAX_RESULT
    # supervised warm start
    sft_steps: int = 2400
    batch_size: int = 8
    learning_rate: float = 5e-3
    warmup_fraction: float = 0.05
    n_sft_problems: int = 16000
    # share of SFT targets written in a looser layout (see warmstart_targets.LOOSE_LAYOUTS)
    loose_format_fraction: float = 0.4
    # share of SFT targets whose stated answer is the first calculation's
    # result instead of the last one's (see warmstart_targets.sft_targets)
    shortcut_fraction: float = 0.5
    # measurement
    n_heldout: int = 200
    max_new_tokens: int = 96


def tokenizer_corpus(settings: WarmStartSettings, seed: int) -> list[str]:
    """Texts whose frequent words become tokens: problems, solutions, system prompt."""
    problems = generate_problems(settings.tokenizer_problems, TOKENIZER_SEED_OFFSET + seed, min_steps=1,
                                 max_steps=max(4, settings.max_steps), max_value=settings.max_value,
                                 max_result=settings.max_result)
    texts = [p.question for p in problems] + [p.solution for p in problems]
    fixed = [SYSTEM_PROMPT, "\n".join(CHAT_ROLES), PLAIN_ANSWER.format(answer=0)]
    # Repeated so that every word of these texts passes min_word_count.
    return texts + fixed * settings.min_word_count


def encode_sft_examples(tokenizer, problems: list[Problem]) -> list[tuple[list[int], int]]:
    """Per problem: token ids of prompt + reference completion + eos, and the prompt length."""
    prompts = tokenizer([make_prompt(p.question, tokenizer) for p in problems],
                        add_special_tokens=False)["input_ids"]
    targets = tokenizer([p.solution + tokenizer.eos_token for p in problems],
                        add_special_tokens=False)["input_ids"]
    return [(prompt + target, len(prompt)) for prompt, target in zip(prompts, targets)]


def collate_sft(examples: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; labels are -100 on the prompt and on padding."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        labels[row, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def shared_prefix_length(examples: list[tuple[list[int], int]]) -> int:
    """Number of leading prompt tokens that every example shares (the system turn)."""
    first = examples[0][0]
    length = min(n_prompt for _, n_prompt in examples)
    for ids, _ in examples[1:]:
        length = next((i for i in range(length) if ids[i] != first[i]), length)
    return length


def sft_loss(model, prefix_ids: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean completion-token loss with the shared prefix computed once per batch.

    The system prompt is a third of every sequence; running it once and repeating its key/value cache across the
    batch gives the same loss and gradients as full sequences for about two thirds of the compute.
    """
    size = batch["input_ids"].shape[0]
    cache = None
    if prefix_ids.numel():
        cache = model(input_ids=prefix_ids[None], use_cache=True).past_key_values
        cache.batch_repeat_interleave(size)
        prefix_mask = torch.ones((size, prefix_ids.numel()), dtype=torch.long)
        batch = {**batch, "attention_mask": torch.cat([prefix_mask, batch["attention_mask"]], 1)}
    return model(**batch, past_key_values=cache).loss


def batches(examples: list, batch_size: int, rng: random.Random):
    """Endless batches that visit every example once per (reshuffled) epoch."""
    if not 0 < batch_size <= len(examples):
        raise ValueError(f"batch_size must be in 1..{len(examples)}, got {batch_size}")
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield [examples[i] for i in order[start : start + batch_size]]


def supervised_finetune(model, tokenizer, problems, settings: WarmStartSettings, seed: int,
                        progress: bool = True, on_step=None) -> list[float]:
    """Full fine-tuning on reference completions; returns the loss of every step.  ``on_step(done, total)`` is
    called after each step (a driver that runs the build elsewhere follows it so)."""
    examples = encode_sft_examples(tokenizer, problems)
    n_prefix = shared_prefix_length(examples)
    prefix_ids = torch.tensor(examples[0][0][:n_prefix], dtype=torch.long)
    examples = [(ids[n_prefix:], n_prompt - n_prefix) for ids, n_prompt in examples]
    stream = batches(examples, settings.batch_size, random.Random(seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate,
                                  betas=(0.9, 0.98), weight_decay=0.0)
    warmup = max(1, int(settings.warmup_fraction * settings.sft_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, settings.sft_steps, warmup))
    model.train()
    losses: list[float] = []
    steps = bar(range(settings.sft_steps), desc="warm-start SFT", progress=progress)
    lines = ProgressLines("warm-start SFT", settings.sft_steps, progress=progress)
    for step in steps:
        batch = collate_sft(next(stream), tokenizer.pad_token_id)
        loss = sft_loss(model, prefix_ids, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        steps.set_postfix(loss=f"{losses[-1]:.3f}")
        lines.update(step + 1, f"loss {losses[-1]:.3f}")
        if on_step is not None:
            on_step(step + 1, settings.sft_steps)
    lines.finish(note=f"loss {losses[-1]:.3f}")
    model.eval()
    return losses


@contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` intra-op threads, then restore the previous count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _cache_key(seed: int, settings: WarmStartSettings) -> dict:
    return {"version": WARMSTART_VERSION, "seed": seed, "settings": asdict(settings)}


def read_build_info(out_dir: str | os.PathLike) -> dict | None:
    """The build.json of a finished warm start, or None."""
    try:
        return read_json(Path(out_dir) / BUILD_INFO_FILE)
    except (OSError, ValueError):  # unreadable: treated as not built
        return None


def built_with_other_kernels(info: dict) -> str | None:
    """The kernels a cached build recorded, when this process runs others (else None): torch's CPU capability, or
    MKL's kernels (generic or Intel).

    Such a build holds other weights than this process would build (different float rounding);
    builds that recorded neither (made before they were recorded) are trusted.
    """
    recorded = info.get(RECORD_KEY) or {}
    capability = recorded.get("capability")
    if capability and capability != torch.backends.cpu.get_cpu_capability():
        return f"torch's {capability} CPU kernels"
    kernels = recorded.get("mkl_kernels")
    if kernels and kernels != mkl_kernels(cpu_description()):
        return f"MKL's {kernels} kernels"
    return None


def record_files(folder: Path) -> dict:
    """``{"algorithm": "sha256", "files": {name: {"bytes", "sha256"}}}`` of every file of a build folder."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in (BUILD_INFO_FILE, FILES_RECORD))
    return {"algorithm": "sha256",
            "files": {name: {"bytes": (folder / name).stat().st_size, "sha256": sha256_of(folder / name)}
                      for name in names}}


def recorded_files_problem(folder: Path) -> str | None:
    """What differs from ``files.json`` (it or a file missing, of another size or hash), or None when nothing does."""
    if not (folder / FILES_RECORD).is_file():
        return f"{FILES_RECORD}, the build's record of its files' sizes and sha256, is missing"
    try:
        record = json.loads(read_text(folder / FILES_RECORD))
        files = record["files"]
        expected = {name: (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{FILES_RECORD} is not a record of the build's files ({type(error).__name__}: {error})"
    unlisted = [name for name in REQUIRED_FILES if name not in expected]
    if unlisted:
        return f"{FILES_RECORD} does not list {', '.join(unlisted)}"
    for name, (size, digest) in expected.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} when built"
        if sha256_of(path) != digest:
            return f"{name} has another sha256 than when built (its bytes changed)"
    return None


def loadable_problem(folder: Path) -> str | None:
    """What stops ``folder`` from loading as a model whose tokenizer fits it, or None.

    Checks what needs no record: the files loading needs exist, the JSON files and the safetensors header and
    data extent are whole, and the tokenizer has as many tokens as the model has embedding rows (a tokenizer
    that lost tokens would encode prompts to nothing, or to ids the model does not have).
    """
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
    try:
        config = json.loads(read_text(folder / "config.json"))
        json.loads(read_text(folder / "tokenizer_config.json"))
        tokens = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            rows = weights.get_slice(EMBEDDINGS).get_shape()[0]
    except Exception as error:  # safetensors and tokenizers raise their own types for torn files
        return f"a file does not load ({type(error).__name__}: {error})"
    if not tokens == rows == config.get("vocab_size"):
        return (f"the tokenizer has {tokens} tokens, the model {rows} embedding rows "
                f"(config.json: vocab_size {config.get('vocab_size')})")
    return None


def cache_problem(folder: str | os.PathLike) -> str | None:
    """What is wrong with a finished build's files, or None when they are as built.

    The files are checked against the record the build wrote (``files.json``), then for loading. A folder
    without that record is never recorded from what is on disk, which may be damaged: its problem is the
    missing record, so a cache is rebuilt and a folder named by path refused.
    """
    folder = Path(folder)
    return recorded_files_problem(folder) or loadable_problem(folder)


def is_cached(out_dir: Path, key: dict) -> bool:
    """``out_dir`` holds a finished build whose build.json records ``key``, made with this process's kernels and
    with its files as built (a damaged or foreign build says so and is built again)."""
    info = read_build_info(out_dir)
    if info is None:
        return False
    if not all(info.get(field) == value for field, value in key.items()):
        return False
    if other := built_with_other_kernels(info):
        print(f"{out_dir} was built with {other}, this process runs others: rebuilding it (saah_lib.numerics)",
              flush=True)
        return False
    if problem := cache_problem(out_dir):
        print(f"the warm-start cache {out_dir} is damaged ({problem}): rebuilding it", flush=True)
        return False
    return True


def _build_into(folder: Path, seed: int, settings: WarmStartSettings, progress: bool, on_step=None) -> dict:
    """Tokenizer, model and SFT saved into ``folder``; returns the build record."""
    started = time.perf_counter()
    tokenizer = build_tokenizer(tokenizer_corpus(settings, seed), settings.min_word_count)
    task = dict(min_steps=settings.min_steps, max_steps=settings.max_steps,
                max_value=settings.max_value, max_result=settings.max_result)
    sft_problems = generate_problems(settings.n_sft_problems, SFT_SEED_OFFSET + seed,
                                     partition="train", id_prefix="sft", **task)
    sft_problems = sft_targets(sft_problems, settings.loose_format_fraction,
                               random.Random(SFT_SEED_OFFSET + seed), settings.shortcut_fraction)
    heldout = generate_problems(settings.n_heldout, HELDOUT_SEED_OFFSET + seed,
                                partition="eval", id_prefix="heldout", **task)
    # fork_rng: the caller's global RNG state is left as it was.
    with torch.random.fork_rng(), torch_threads(BUILD_THREADS):
        torch.manual_seed(seed)
        model = init_tiny_model(tokenizer, settings)
        losses = supervised_finetune(model, tokenizer, sft_problems, settings, seed, progress, on_step)
        pass_at_1 = evaluate_pass_at_1(model, tokenizer, heldout, max_new_tokens=settings.max_new_tokens,
                                       batch_size=50, progress=False).pass_at_1
        numerics = cpu_numerics_record()  # inside the block: the thread count the build ran with
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tail = losses[-10:]
    return {
        **_cache_key(seed, settings),
        "build_seconds": round(time.perf_counter() - started, 2),
        "parameters": parameter_count(model),
        "vocab_size": len(tokenizer),
        "sft_steps": settings.sft_steps,
        "final_sft_loss": round(sum(tail) / max(1, len(tail)), 4),
        "heldout_pass_at_1": pass_at_1,
        "heldout_n": len(heldout),
        "torch_threads": BUILD_THREADS,
        # recorded, not part of the cache key (_cache_key): a build is reused whatever machine made it
        RECORD_KEY: numerics,
    }


def _replace_dir(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``, discarding any previous ``target``."""
    if target.exists():
        stale = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, stale)
        shutil.rmtree(stale, ignore_errors=True)
    os.rename(source, target)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_dead_staging(out_dir: Path) -> list[Path]:
    """Remove the staging (``.<name>.building-<pid>``) and discarded (``.<name>.old-<pid>``) folders beside
    ``out_dir`` whose process has ended: a build killed before it finished leaves them behind."""
    pattern = re.compile(rf"\.{re.escape(out_dir.name)}\.(?:building|old)-(\d+)")
    if not out_dir.parent.is_dir():
        return []
    dead = [p for p in out_dir.parent.iterdir()
            if (m := pattern.fullmatch(p.name)) and p.is_dir() and not _pid_alive(int(m.group(1)))]
    for folder in dead:
        shutil.rmtree(folder, ignore_errors=True)
    return sorted(dead)


def build_atomically(out_dir: Path, build_into) -> dict:
    """``build_into(staging)`` (returns the build record) in a hidden sibling of ``out_dir``, then the record of its
    files and build.json, then one rename into place: an interrupted build never leaves a folder that looks
    finished.  Returns the build record."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.with_name(f".{out_dir.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        info = build_into(staging)
        atomic_write_json(staging / FILES_RECORD, record_files(staging))
        atomic_write_json(staging / BUILD_INFO_FILE, info)  # last: its presence marks a complete folder
        _replace_dir(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return info


def build_warm_start(out_dir: str | os.PathLike = TINY_WARMSTART_DIR, seed: int = 0, *,
                     settings: WarmStartSettings | None = None, force: bool = False, progress: bool = True,
                     on_step=None) -> Path:
    """Build (or reuse) the warm-started tiny model in ``out_dir``; returns its path.

    A folder whose build.json records the same seed, settings and recipe version is returned as is unless ``force``.
    The build happens in a hidden sibling folder that is renamed into place only when complete, so an interrupted
    build never leaves a folder that looks finished.  ``on_step(done, total)`` follows its supervised steps.
    """
    settings = settings or WarmStartSettings()
    out_dir = Path(out_dir)
    for folder in remove_dead_staging(out_dir):
        say(f"removed {folder}, left by a warm-start build that was killed", progress)
    if not force and is_cached(out_dir, _cache_key(seed, settings)):
        return out_dir
    say(f"building the tiny warm start in {repo_relative(out_dir)} (once, then cached; its time on one core: "
        f"build_seconds in results/warm_starts/tiny-warmstart/build.json): {settings.sft_steps} supervised "
        f"steps, then a held-out evaluation", progress)
    info = build_atomically(out_dir, lambda staging: _build_into(staging, seed, settings, progress, on_step))
    if progress:  # the record's numbers are read only when the line is printed
        say(f"tiny warm start built in {info['build_seconds']:.0f} s: held-out Pass@1 "
            f"{info['heldout_pass_at_1']:.3f}")
    return out_dir
