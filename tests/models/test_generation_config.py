"""One generation config for every backend: settings come from the run, never from the checkpoint.

The model here carries Qwen2.5-Instruct's ``generation_config.json`` (sampling on, temperature 0.7,
top-p 0.8, top-k 20, repetition penalty 1.05); greedy evaluation must ignore all of it on ``hf`` and
``compiled`` alike. A repetition penalty the run asks for is applied by both, to the same tokens.
"""

import json

import pytest
import torch
from peft import LoraConfig

from saah_lib.models.evaluate import evaluate_pass_at_1, greedy_completions, run_generation_config
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.models.rollout import StaticRollout
from saah_lib.models.sampling import SamplingSettings
from saah_lib.tasks.synthetic import generate_problems
from tests.models.test_rollout import (
    PROMPTS,
    build_trainer,
    compiled_engine,
    hf_completions,
    prompt_batch,
    small_qwen2,
    spread_weights,
)

QWEN_INSTRUCT_GENERATION = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                            "repetition_penalty": 1.05}


@pytest.fixture(scope="module")
def qwen_defaults_model_dir(tiny_random_model_dir, tmp_path_factory):
    """The tiny random model with wider weights and Qwen2.5-Instruct's generation defaults in its folder."""
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    spread_weights(model, seed=4, std=0.5)
    folder = tmp_path_factory.mktemp("qwen_defaults")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **QWEN_INSTRUCT_GENERATION}))
    return folder


def test_the_checkpoint_defaults_reach_plain_generate_but_not_our_evaluation(qwen_defaults_model_dir):
    model, tok = load_model_and_tokenizer(str(qwen_defaults_model_dir))
    assert model.generation_config.repetition_penalty == 1.05 and model.generation_config.do_sample
    prompts = [tok(p.question, add_special_tokens=False)["input_ids"] for p in generate_problems(8, seed=3)]
    eos = [tok.eos_token_id]
    # plain generate picks up the checkpoint's penalty: what greedy evaluation used to decode with
    leaked = hf_completions(model, prompts, tok.pad_token_id, eos, 24, do_sample=False)
    with run_generation_config(model):
        plain = hf_completions(model, prompts, tok.pad_token_id, eos, 24, do_sample=False)
    assert leaked != plain  # the penalty changes greedy tokens on this model: the comparison below can fail
    assert model.generation_config.repetition_penalty == 1.05  # restored
    engine = StaticRollout(max_new_tokens=24, pad_token_id=tok.pad_token_id, eos_token_ids=eos)
    ours, _ = engine.generate(model, prompts, SamplingSettings(do_sample=False))
    assert ours == plain


@pytest.mark.parametrize("compile_backend", [None, "eager"], ids=["static", "static-compiled"])
def test_hf_and_compiled_greedy_give_the_same_completions_and_pass_at_1(qwen_defaults_model_dir, compile_backend):
    torch._dynamo.reset()
    model, tok = load_model_and_tokenizer(str(qwen_defaults_model_dir))
    problems = generate_problems(10, seed=5)
    engine = None
    if compile_backend:
        engine = StaticRollout(max_new_tokens=20, pad_token_id=tok.pad_token_id, eos_token_ids=tok.eos_token_id,
                               compile=True, compile_backend=compile_backend, name="evaluation")
    kw = dict(max_new_tokens=20, batch_size=4, progress=False)  # 10 = 4 + 4 + 2: a padded last batch
    hf = evaluate_pass_at_1(model, tok, problems, generation_backend="hf", **kw)
    fast = evaluate_pass_at_1(model, tok, problems, generation_backend="compiled", engine=engine, **kw)
    assert [r["completion"] for r in fast.records] == [r["completion"] for r in hf.records]
    assert fast.pass_at_1 == hf.pass_at_1
    assert len({r["completion"] for r in hf.records}) > 1
    if engine is not None:
        assert engine.health.record()["compiled_graphs"] >= 1 and not engine.health.fell_back


@pytest.mark.parametrize("backend", [None, "eager"], ids=["static", "static-compiled"])
def test_repetition_penalty_greedy_equals_generate(backend):
    torch._dynamo.reset()
    model = small_qwen2(seed=2)
    theirs = hf_completions(model, PROMPTS, 0, [], 24, do_sample=False, repetition_penalty=1.3)
    assert theirs != hf_completions(model, PROMPTS, 0, [], 24, do_sample=False)  # the penalty matters here
    engine = (compiled_engine(24, [], backend=backend, buckets=(16,)) if backend
              else StaticRollout(max_new_tokens=24, pad_token_id=0, eos_token_ids=[], buckets=(16,)))
    ours, _ = engine.generate(model, PROMPTS, SamplingSettings(do_sample=False, repetition_penalty=1.3))
    assert ours == theirs


def test_sampling_with_every_setting_equals_generate_for_a_seed():
    model = small_qwen2(seed=3)
    settings = dict(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.2)
    torch.manual_seed(5)
    theirs = hf_completions(model, PROMPTS, 0, [], 30, do_sample=True, **settings)
    engine = StaticRollout(max_new_tokens=30, pad_token_id=0, eos_token_ids=[], buckets=(16,))
    torch.manual_seed(5)
    ours, logps = engine.generate(model, PROMPTS, SamplingSettings(**settings))
    assert ours == theirs
    # the log-probs stay those of the training forward: raw logits over the temperature, no penalty
    ids = torch.tensor([[0] * (16 - len(p)) + p + r for p, r in zip(PROMPTS, ours)])
    mask = (torch.arange(ids.size(1)) >= (16 - torch.tensor([len(p) for p in PROMPTS]))[:, None]).long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, 15:-1].float()
    expected = (logits / 0.7).log_softmax(-1).gather(2, ids[:, 16:, None]).squeeze(2)
    assert torch.allclose(torch.tensor(logps), expected, atol=1e-5)


@pytest.mark.parametrize("setting", [{"no_repeat_ngram_size": 3}, {"typical_p": 0.9}, {"num_beams": 2},
                                     {"suppress_tokens": [5]}])
def test_a_setting_the_engine_lacks_is_refused_by_name(setting):
    (name,) = setting
    with pytest.raises(ValueError, match=f"does not implement the generation setting {name}="):
        SamplingSettings.from_generation_kwargs({"do_sample": True, "temperature": 0.9, **setting})
    neutral = SamplingSettings.from_generation_kwargs({"num_beams": 1, "typical_p": 1.0, "suppress_tokens": None,
                                                       "max_new_tokens": 8, "cache_implementation": None})
    assert neutral == SamplingSettings()


def test_the_trainer_refuses_an_unimplemented_setting_before_training(tiny_random_model_dir, tmp_path):
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    with pytest.raises(ValueError, match="typical_p"):
        build_trainer(model, tok, tmp_path, generation_backend="compiled", generation_kwargs={"typical_p": 0.5})


def test_trainer_rollouts_take_the_configs_penalty_on_both_backends(qwen_defaults_model_dir, tmp_path):
    """TRL's path and the engine sample the same tokens under the run's penalty, whatever the checkpoint says."""
    model, tok = load_model_and_tokenizer(str(qwen_defaults_model_dir))
    trainer = build_trainer(model, tok, tmp_path, generation_backend="compiled", repetition_penalty=1.3,
                            max_completion_length=24)
    prompts = prompt_batch(tok) * 2
    torch.manual_seed(2)
    ours, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    trainer.generation_backend = "hf"
    torch.manual_seed(2)
    theirs, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    assert ours == theirs and trainer.model.training


def test_hf_and_compiled_sample_the_same_policy_with_lora_dropout(tiny_random_model_dir, tmp_path):
    """The rollout policy is the model in eval mode on both backends, so LoRA dropout never applies.

    TRL's own generate path samples in train mode: with dropout 0.5 its tokens would differ from the
    engine's for the same seed (and it would draw dropout masks from the same generator)."""
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    spread_weights(model)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5, target_modules=["q_proj", "v_proj", "down_proj"],
                      task_type="CAUSAL_LM")
    trainer = build_trainer(model, tok, tmp_path, peft_config=lora, generation_backend="compiled",
                            max_completion_length=20)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    prompts = prompt_batch(tok) * 2
    torch.manual_seed(4)
    ours, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    after_ours = torch.rand(2)
    trainer.generation_backend = "hf"
    torch.manual_seed(4)
    theirs, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    assert ours == theirs and torch.equal(after_ours, torch.rand(2))
    assert trainer.model.training  # the trainer's mode is given back
    with torch.no_grad():  # dropout does act in train mode: sampling there would be another policy
        x = torch.tensor([prompts[0]])
        assert not torch.equal(trainer.model(x).logits, trainer.model(x).logits)


def test_greedy_completions_restore_the_models_mode(qwen_defaults_model_dir):
    model, tok = load_model_and_tokenizer(str(qwen_defaults_model_dir))
    model.train()
    greedy_completions(model, tok, ["1 + 1 ="], max_new_tokens=3, progress=False, generation_backend="compiled")
    assert model.training


# ---- generation_config = None (issue 39, item 10): transformers' own generate fails on it

def test_evaluation_of_a_model_without_generation_config_uses_the_empty_one(qwen_defaults_model_dir):
    model, tok = load_model_and_tokenizer(str(qwen_defaults_model_dir))
    problems = generate_problems(4, seed=5)
    kw = dict(max_new_tokens=12, batch_size=4, progress=False, generation_backend="hf")
    expected = evaluate_pass_at_1(model, tok, problems, **kw)
    model.generation_config = None
    got = evaluate_pass_at_1(model, tok, problems, **kw)
    assert [r["completion"] for r in got.records] == [r["completion"] for r in expected.records]
    assert model.generation_config is None  # restored as it was


def test_the_trainer_refuses_a_model_without_generation_config_naming_the_field(tiny_random_model_dir, tmp_path):
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    model.generation_config = None  # its checkpoints could not be saved: save_pretrained fails on it
    with pytest.raises(ValueError, match=r"model\.generation_config is None: .*save_pretrained"):
        build_trainer(model, tok, tmp_path)
    assert not (tmp_path / "out").exists()
