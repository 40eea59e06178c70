"""The CPU stand-in model: tokenizer, chat template, save/load by path, cached builds."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from saah_lib.method.reward import TAGS
from saah_lib.models import warmstart as tiny_model
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.models.tiny import IM_END, IM_START, PAD_TOKEN, build_tokenizer
from saah_lib.models.warmstart import (
    BUILD_INFO_FILE,
    EMBEDDINGS,
    FILES_RECORD,
    WarmStartSettings,
    build_atomically,
    build_warm_start,
    cache_problem,
    is_cached,
    read_build_info,
    tokenizer_corpus,
)
from saah_lib.numerics import (
    MODE_VARIABLE,
    PINNED_CAPABILITY,
    RECORD_KEY,
    cpu_description,
    cpu_numerics_record,
    pin_obstacle,
)
from saah_lib.tasks.prompts import SYSTEM_PROMPT, make_prompt
from saah_lib.tasks.synthetic import generate_problems

# Small enough that a whole build takes a second or two.
TINY = WarmStartSettings(
    hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
    tokenizer_problems=100, sft_steps=3, batch_size=4, n_sft_problems=20, n_heldout=4,
    max_new_tokens=8,
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(tokenizer_corpus(TINY, seed=0))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_warm_start(tmp_path_factory.mktemp("warm") / "model", seed=0, settings=TINY,
                            progress=False)


def token_count(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_tags_and_chat_markers_are_single_tokens(tokenizer):
    for token in (*TAGS, IM_START, IM_END, PAD_TOKEN):
        assert token_count(tokenizer, token) == 1, token
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == PAD_TOKEN


def test_digits_are_single_tokens(tokenizer):
    ids = tokenizer("1234567890", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == list("1234567890")


def test_vocabulary_is_small(tokenizer):
    assert 256 < len(tokenizer) < 1000


def test_tagged_solution_round_trips(tokenizer):
    for problem in generate_problems(20, seed=1):
        ids = tokenizer(problem.solution, add_special_tokens=False)["input_ids"]
        # TRL decodes completions with skip_special_tokens=True: tags must survive it.
        assert tokenizer.decode(ids, skip_special_tokens=True) == problem.solution


def test_any_text_round_trips(tokenizer):
    text = "Émile paid $1,234.50 — 15% off!\n\tÜber ✓ <SOLUTION>7</SOLUTION>"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_chat_template_renders_through_make_prompt(tokenizer):
    prompt = make_prompt("How many?", tokenizer)
    assert prompt == (f"{IM_START}system\n{SYSTEM_PROMPT}{IM_END}\n"
                      f"{IM_START}user\nHow many?{IM_END}\n{IM_START}assistant\n")


def test_prompts_and_completions_are_short(tokenizer):
    problem = generate_problems(1, seed=2, min_steps=3, max_steps=3)[0]
    assert token_count(tokenizer, make_prompt(problem.question, tokenizer)) < 130
    assert token_count(tokenizer, problem.solution) < 90


def test_build_writes_a_model_folder(built):
    for name in ("config.json", "model.safetensors", "tokenizer.json", BUILD_INFO_FILE):
        assert (built / name).is_file(), name
    info = read_build_info(built)
    assert info["seed"] == 0 and info["sft_steps"] == TINY.sft_steps
    assert info["parameters"] > 0 and info["build_seconds"] >= 0
    assert 0.0 <= info["heldout_pass_at_1"] <= 1.0
    assert info["final_sft_loss"] > 0
    assert not list(built.parent.glob(".*building*"))


def test_folder_loads_by_path_and_generates(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(built)
    tokenizer = AutoTokenizer.from_pretrained(built)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.chat_template and tokenizer.eos_token == IM_END
    batch = tokenizer([make_prompt("Tom has 3 pens.", tokenizer)], return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**batch, max_new_tokens=5, do_sample=False)
    assert output.shape[1] > batch["input_ids"].shape[1]


def test_reloaded_tokenizer_encodes_like_the_built_one(built, tokenizer):
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(built)
    problem = generate_problems(1, seed=3)[0]
    text = make_prompt(problem.question, tokenizer) + problem.solution + IM_END
    assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]


def test_same_seed_and_settings_reuse_the_cache(built, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(tiny_model, "_build_into", fail)
    assert build_warm_start(built, seed=0, settings=TINY, progress=False) == built


def test_other_settings_or_force_rebuild(built, monkeypatch):
    calls = []

    def record(folder, seed, settings, progress, on_step=None):
        calls.append(seed)
        folder.mkdir(parents=True)
        return {"seed": seed, "settings": "stub"}

    monkeypatch.setattr(tiny_model, "_build_into", record)
    target = built.parent / "other"
    build_warm_start(target, seed=1, settings=TINY, progress=False)
    build_warm_start(target, seed=1, settings=TINY, force=True, progress=False)
    assert calls == [1, 1]
    assert json.loads((target / BUILD_INFO_FILE).read_text())["seed"] == 1


def test_interrupted_build_leaves_nothing_behind(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tiny_model, "supervised_finetune", crash)
    with pytest.raises(KeyboardInterrupt):
        build_warm_start(tmp_path / "model", settings=TINY, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_builds_are_deterministic(built, tmp_path):
    again = build_warm_start(tmp_path / "model", seed=0, settings=TINY, progress=False)
    first, second = read_build_info(built), read_build_info(again)
    assert first["final_sft_loss"] == second["final_sft_loss"]
    assert (built / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()


# ---------------------------------------------------------------------- under the pinned CPU numerics

def _cached_build_copy(built: Path, target: Path, numerics: dict | None) -> Path:
    """A copy of a finished build whose record claims ``numerics`` (None: recorded before numerics were)."""
    shutil.copytree(built, target)
    info = read_build_info(target)
    info.pop(RECORD_KEY, None)
    if numerics is not None:
        info[RECORD_KEY] = numerics
    (target / BUILD_INFO_FILE).write_text(json.dumps(info))
    (target / "marker").write_text("this copy")  # gone if the folder is rebuilt
    return target


def test_the_build_records_its_cpu_numerics_outside_the_cache_key(built):
    info = read_build_info(built)
    assert info[RECORD_KEY]["capability"] == torch.backends.cpu.get_cpu_capability()
    assert info[RECORD_KEY]["torch_threads"] == tiny_model.BUILD_THREADS
    assert RECORD_KEY not in tiny_model._cache_key(0, TINY)


def test_a_cached_build_made_with_other_kernels_is_rebuilt_and_an_unrecorded_one_reused(built, tmp_path):
    here = torch.backends.cpu.get_cpu_capability()
    other = _cached_build_copy(built, tmp_path / "other", {"capability": "DEFAULT" if here != "DEFAULT" else "AVX2"})
    build_warm_start(other, seed=0, settings=TINY, progress=False)
    assert not (other / "marker").exists() and read_build_info(other)[RECORD_KEY]["capability"] == here
    older = _cached_build_copy(built, tmp_path / "older", None)
    build_warm_start(older, seed=0, settings=TINY, progress=False)
    assert (older / "marker").exists()  # a build from before numerics were recorded stays valid
    # the same torch kernels, but MKL's other ones (an Intel-built cache on an AMD CPU, or the reverse)
    recorded = read_build_info(built)[RECORD_KEY]
    other_mkl = "generic" if recorded["mkl_kernels"] == "Intel" else "Intel"
    intel = _cached_build_copy(built, tmp_path / "intel", {**recorded, "mkl_kernels": other_mkl})
    build_warm_start(intel, seed=0, settings=TINY, progress=False)
    assert not (intel / "marker").exists()


# A short build at a few hundred SFT steps. Its weights under the pinned numerics with torch 2.13.0, measured on
# an AMD EPYC (AVX-512) CPU; the same build with torch's AVX-512 kernels (SAAH_CPU_NUMERICS=native there) gives
# 327cbdfe60fec812bea6aa264f9fc42e47be5176a07cee9458ffabaca0ce9339, so a process that lost the pin fails here.
SHORT = WarmStartSettings(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256,
                          tokenizer_problems=500, sft_steps=300, n_sft_problems=2400, n_heldout=20, max_new_tokens=48)
SHORT_BUILD_SHA256 = "e4d0f53d5194ced9de2c883efc1cfd4cf6661f7bd3c245834747cb58b47cbc1b"


@pytest.mark.e2e
def test_a_short_build_under_the_pinned_numerics_has_the_committed_weights(tmp_path):
    numerics = cpu_numerics_record()
    if pin_obstacle(cpu_description()):
        pytest.skip(f"the pin cannot hold on this CPU: {pin_obstacle(cpu_description())}")
    if numerics["mkl_kernels"] != "generic":
        pytest.skip("MKL runs its Intel kernels on this CPU, not the generic ones this hash was made with "
                    "(docs/reproducibility.md)")
    assert numerics["mode"] == "pinned", f"{MODE_VARIABLE} switches the pin off in this process"
    assert numerics["capability"] == PINNED_CAPABILITY  # conftest imports saah_lib before torch
    model = build_warm_start(tmp_path / "short", settings=SHORT, progress=False)
    digest = hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    assert digest == SHORT_BUILD_SHA256, "other weights than under the pinned numerics (torch still 2.13.0?)"
def test_a_build_says_at_once_what_it_does_and_how_far_it_is(tmp_path, capsys):
    # progress=True with output that is not a terminal (as under papermill --stdout-file /dev/stdout or in a log file)
    build_warm_start(tmp_path / "model", seed=0, settings=TINY, progress=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("building the tiny warm start in ") and "(once, then cached" in lines[0]
    assert lines[1] == f"warm-start SFT: 0/{TINY.sft_steps} steps"
    assert lines[2].startswith(f"warm-start SFT: {TINY.sft_steps}/{TINY.sft_steps} steps (100%)")
    assert lines[-1].startswith("tiny warm start built in ") and "held-out Pass@1" in lines[-1]
    assert len(lines) == 4  # three SFT steps: no line per step
    assert "\r" not in "".join(lines)


# ---------------------------------------------------------------------- a damaged cache is never used

def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # inside the tensor data: the header still parses
    path.write_bytes(bytes(data))


def _smaller_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()
    small = WarmStartSettings(**{**TINY.__dict__, "tokenizer_problems": 2})
    build_tokenizer(tokenizer_corpus(small, seed=0)).save_pretrained(folder)


DAMAGES = {
    "truncated weights": (lambda f: _truncate(f / "model.safetensors"), "model.safetensors has"),
    "flipped byte": (lambda f: _flip_a_byte(f / "model.safetensors"), "model.safetensors has another sha256"),
    "no tokenizer.json": (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    "other tokenizer": (_smaller_tokenizer, "tokenizer.json has"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_cache_is_rebuilt_with_a_message_and_refused_by_path(built, tmp_path, capsys, damage):
    make_damage, problem = DAMAGES[damage]
    copy = shutil.copytree(built, tmp_path / "model")
    make_damage(copy)
    with pytest.raises(RuntimeError, match=rf"the warm-start folder {copy} is damaged \({problem}.*Rebuild it"):
        load_model_and_tokenizer(str(copy))
    build_warm_start(copy, seed=0, settings=TINY, progress=False)
    assert f"the warm-start cache {copy} is damaged ({problem}" in capsys.readouterr().out
    for name in ("model.safetensors", "tokenizer.json"):
        assert (copy / name).read_bytes() == (built / name).read_bytes()
    assert cache_problem(copy) is None


def invert_tensor_bytes(path: Path, tensor: str = EMBEDDINGS, n: int = 4096) -> None:
    """Invert the first ``n`` bytes of one tensor's data in a safetensors file: it still loads, as other weights."""
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    start, end = json.loads(data[8:8 + header])[tensor]["data_offsets"]
    first = 8 + header + start
    assert end - start >= n
    data[first:first + n] = bytes(b ^ 0xFF for b in data[first:first + n])
    path.write_bytes(bytes(data))


def _copy_build(source: Path):
    """A fake build: ``source``'s files without its records, and the build record ``{"fake": 1}``."""
    def build_into(staging: Path) -> dict:
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(BUILD_INFO_FILE, FILES_RECORD))
        return {"fake": 1}
    return build_into


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "embeddings inverted"])
def test_a_cache_without_its_record_is_rebuilt_never_recorded_from_its_files(built, tmp_path, capsys, damaged):
    out = tmp_path / "model"
    build_atomically(out, _copy_build(built))
    (out / FILES_RECORD).unlink()
    (out / "marker").write_text("this copy")  # gone if the folder is rebuilt
    if damaged:
        invert_tensor_bytes(out / "model.safetensors")
    assert cache_problem(out) == f"{FILES_RECORD}, the build's record of its files' sizes and sha256, is missing"
    assert not (out / FILES_RECORD).exists()  # nothing recorded from what is on disk
    with pytest.raises(RuntimeError, match=rf"{out} is damaged \({FILES_RECORD}, .*Rebuild it"):
        load_model_and_tokenizer(str(out))  # by path: refused
    assert not is_cached(out, {"fake": 1})  # as a cache: rebuilt
    assert f"the warm-start cache {out} is damaged ({FILES_RECORD}, " in capsys.readouterr().out
    build_atomically(out, _copy_build(built))
    assert is_cached(out, {"fake": 1}) and not (out / "marker").exists()
    assert (out / "model.safetensors").read_bytes() == (built / "model.safetensors").read_bytes()


def test_the_record_lists_every_file_of_the_build_with_its_size_and_hash(built):
    files = json.loads((built / FILES_RECORD).read_text())["files"]
    on_disk = {p.name for p in built.iterdir()} - {BUILD_INFO_FILE, FILES_RECORD}
    assert set(files) == on_disk and {"model.safetensors", "tokenizer.json"} <= on_disk
    weights = built / "model.safetensors"
    assert files["model.safetensors"] == {"bytes": weights.stat().st_size,
                                          "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}


def test_staging_folders_of_killed_builds_are_removed_and_a_live_ones_kept(built, tmp_path):
    import subprocess
    import sys

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    copy = shutil.copytree(built, tmp_path / "model")
    killed = [tmp_path / f".model.building-{dead_pid}", tmp_path / f".model.old-{dead_pid}"]
    live = tmp_path / f".model.building-{os.getpid()}"
    other = tmp_path / f".other.building-{dead_pid}"
    for folder in (*killed, live, other):
        (folder / "part").mkdir(parents=True)
    build_warm_start(copy, seed=0, settings=TINY, progress=False)
    assert not any(f.exists() for f in killed)
    assert live.exists() and other.exists()  # a build still running; another cache's folder
