"""The static-shape rollout engine (saah_lib.models.rollout) against transformers' ``generate`` and TRL's own path."""

from collections import Counter

import pytest
import torch
from trl import GRPOConfig

from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models import rollout
from saah_lib.models.backends import resolve_backend
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.models.rollout import SamplingSettings, StaticRollout, prompt_bucket, reserved_capacity
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.config import make_config
from saah_lib.training.trainer import SAAHGRPOConfig


def left_pad(prompts, pad):
    n = max(map(len, prompts))
    ids = torch.tensor([[pad] * (n - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def hf_completions(model, prompts, pad, eos, max_new, **kw):
    """``model.generate``'s completions, cut after the first EOS like TRL does."""
    ids, mask = left_pad(prompts, pad)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, pad_token_id=pad,
                         eos_token_id=eos, **kw)[:, ids.size(1):].tolist()
    cut = []
    for row in out:
        ends = [i for i, t in enumerate(row) if t in eos]
        cut.append(row[: ends[0] + 1] if ends else row)
    return cut


def spread_weights(model, seed=0, std=0.3):
    """Re-draw the weight matrices wider: at its initialisation scale the tiny model emits one token
    whatever the prompt, which would make these comparisons trivial."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


def small_qwen2(seed=0, vocab=101):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True)
    return spread_weights(Qwen2ForCausalLM(config).eval(), seed)


def with_random_lora(model, seed=1):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                  target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero, which would make the adapter a no-op
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return peft_model.eval()


PROMPTS = [[3, 4, 7, 8, 9, 10, 11, 12, 13], [12, 13], [14, 15, 16, 17], [20, 21, 22, 23, 24, 25]]


def eos_hit_early(model, prompts, max_new):
    """A token that greedy decoding emits early in some rows but not in all: an EOS that ends some rows."""
    free = hf_completions(model, prompts, 0, [], max_new, do_sample=False)
    for t, _ in Counter(tok for row in free for tok in row[: max_new // 2]).most_common():
        if t != 0 and not all(t in row for row in free):
            return t
    pytest.fail("no candidate EOS token")


# ---------------------------------------------------------------------- backend choice


def test_auto_backend_is_the_static_engine_and_a_named_backend_is_kept():
    assert resolve_backend("auto") == "compiled"
    assert resolve_backend("hf") == "hf" and resolve_backend("compiled") == "compiled"
    with pytest.raises(ValueError, match="generation_backend"):
        resolve_backend("fast")


def test_config_names_a_bad_backend_or_vllm_mode():
    assert make_config("tiny").trainer.generation_backend == "auto"
    with pytest.raises(ValueError, match="generation_backend"):
        make_config("tiny", generation_backend="turbo")
    with pytest.raises(ValueError, match="vllm_mode"):
        make_config("tiny", vllm_mode="remote")


def test_prompt_buckets_are_few_and_static():
    assert [prompt_bucket(n) for n in (1, 64, 65, 200, 512, 1025)] == [64, 64, 128, 256, 512, 2048]


def test_a_reserved_capacity_is_the_bucket_or_the_length_rounded_up_to_64_whichever_is_less():
    assert [reserved_capacity(n) for n in (1, 64, 65, 200, 251, 268, 512, 1025)] == [
        64, 64, 128, 256, 256, 320, 512, 1088]
    assert reserved_capacity(12, (8, 16)) == 16 and reserved_capacity(5, (8, 16)) == 8
    engine = StaticRollout(max_new_tokens=10, pad_token_id=0, eos_token_ids=[], prompt_capacity=268)
    assert engine.cache_len == 330
    # batches are padded to their bucket within the capacity, and grow it by whole buckets past it
    assert [engine.prompt_width(n) for n in (30, 200, 268)] == [64, 256, 320] and engine.cache_len == 330
    assert engine.prompt_width(300) == 320 and engine.prompt_width(321) == 512 and engine.cache_len == 522


# ---------------------------------------------------------------------- greedy


def test_greedy_matches_generate_on_the_tiny_model_with_early_eos(tiny_random_model_dir):
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    spread_weights(model.eval())
    prompts = [tok(q.question, add_special_tokens=False)["input_ids"] for q in generate_problems(5, seed=3)]
    assert len({len(p) for p in prompts}) > 1  # mixed prompt lengths
    eos = eos_hit_early(model, prompts, 24)
    engine = StaticRollout(max_new_tokens=24, pad_token_id=tok.pad_token_id, eos_token_ids=[eos])
    ours, logps = engine.generate(model, prompts, SamplingSettings(do_sample=False))
    theirs = hf_completions(model, prompts, tok.pad_token_id, [eos], 24, do_sample=False)
    assert ours == theirs
    assert any(len(r) < 24 and r[-1] == eos for r in ours) and any(len(r) == 24 for r in ours)
    assert [len(x) for x in logps] == [len(r) for r in ours]


def test_a_repeated_prompt_is_encoded_once_and_its_rows_decode_as_if_each_were_encoded(tiny_random_model_dir,
                                                                                       monkeypatch):
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    spread_weights(model.eval())
    a, b, c = [tok(q.question, add_special_tokens=False)["input_ids"] for q in generate_problems(3, seed=5)]
    prompts = [a, a, b, a, c, b]  # repeats apart and together, of mixed lengths
    engine = StaticRollout(max_new_tokens=16, pad_token_id=tok.pad_token_id, eos_token_ids=[tok.eos_token_id])
    encoded = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: encoded.append(kwargs["input_ids"].shape),
                                           with_kwargs=True)

    def sample():
        torch.manual_seed(4)
        return engine.generate(model, prompts, SamplingSettings(temperature=0.9)), torch.rand(2)

    ours = sample()
    hook.remove()
    assert encoded[0][0] == 3 and all(shape[0] == 6 for shape in encoded[1:])  # 3 distinct prompts, 6 rows
    monkeypatch.setattr(StaticRollout, "_prefill",
                        lambda self, model, prompt_ids, ids, positions, mask, cache: rollout._forward(
                            model, ids, positions, mask, cache))
    every_row = sample()
    (tokens, logps), rng = ours
    assert tokens == every_row[0][0] and torch.equal(rng, every_row[1])  # the same draws, the RNG left alike
    # A prefill of 3 rows rounds as one of 6 does up to float32's last bit (the matmuls block by row count)
    assert all(torch.allclose(torch.tensor(x), torch.tensor(y), rtol=0, atol=1e-6)
               for x, y in zip(logps, every_row[0][1]))


def test_greedy_matches_generate_with_a_nonzero_unmerged_lora_and_leaves_weights_exactly():
    model = with_random_lora(small_qwen2())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    eos = eos_hit_early(model, PROMPTS, 20)
    theirs = hf_completions(model, PROMPTS, 0, [eos], 20, do_sample=False)  # unmerged adapter
    # the adapter matters: without it greedy decoding differs
    with model.disable_adapter():
        assert hf_completions(model, PROMPTS, 0, [eos], 20, do_sample=False) != theirs
    engine = StaticRollout(max_new_tokens=20, pad_token_id=0, eos_token_ids=[eos], buckets=(16,))
    ours, _ = engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))
    assert ours == theirs
    assert any(len(r) < 20 for r in ours)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert not any(getattr(m, "merged", False) for m in model.modules())


def test_the_eager_engine_decodes_lora_merged_as_peft_merges_it_and_restores_the_model():
    import copy

    model = with_random_lora(small_qwen2())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    eos = eos_hit_early(model, PROMPTS, 20)
    theirs = hf_completions(copy.deepcopy(model).merge_and_unload(), PROMPTS, 0, [eos], 20, do_sample=False)
    lora_calls = []
    hooks = [m.register_forward_hook(lambda *_: lora_calls.append(1)) for n, m in model.named_modules()
             if n.endswith("lora_A.default")]
    engine = StaticRollout(max_new_tokens=20, pad_token_id=0, eos_token_ids=[eos], buckets=(16,))
    ours, _ = engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))
    for hook in hooks:
        hook.remove()
    assert engine.merge_lora and lora_calls == [] and ours == theirs
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert not any(getattr(m, "merged", False) for m in model.modules())


def test_merged_lora_restores_the_weights_and_marks_when_its_body_raises():
    model = with_random_lora(small_qwen2())
    weights = {n: (p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    with pytest.raises(RuntimeError, match="inside"):
        with rollout.merged_lora(model):
            assert all(m.merged for m in model.modules() if isinstance(m, rollout.LoraLayer))
            raise RuntimeError("inside")
    assert all((p.data_ptr(), True) == (weights[n][0], torch.equal(p, weights[n][1]))
               for n, p in model.named_parameters())
    assert not any(m.merged for m in model.modules() if isinstance(m, rollout.LoraLayer))


def test_greedy_evaluation_through_the_static_path_equals_hf(tiny_random_model_dir):
    from saah_lib.models.evaluate import greedy_completions

    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    spread_weights(model)
    prompts = [p.question for p in generate_problems(7, seed=5)]
    kw = dict(max_new_tokens=12, batch_size=3, progress=False)  # 7 = 3 + 3 + 1: a padded last batch
    hf = greedy_completions(model, tok, prompts, generation_backend="hf", **kw)
    fast = greedy_completions(model, tok, prompts, generation_backend="compiled", **kw)
    assert fast == hf and len(set(hf)) > 1


# ---------------------------------------------------------------------- inside the trainer


def build_trainer(model, tok, tmp_path, peft_config=None, **args):
    common = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=16, report_to="none",
                  use_cpu=True, bf16=False, logging_steps=1, max_steps=1, seed=0, beta=0.0, temperature=0.9)
    trainer = StudyTrainer(
        model=model, reward_funcs=list(TRL_REWARD_FUNCS),
        args=SAAHGRPOConfig(output_dir=str(tmp_path / "out"), **{**common, **args}),
        train_dataset=to_trl_dataset(generate_problems(8, seed=0), tok), processing_class=tok,
        peft_config=peft_config,
    )
    trainer.model.train()
    return trainer


def prompt_batch(tok, n=4):
    return [tok(p.question, add_special_tokens=False)["input_ids"] for p in generate_problems(n, seed=7)]


def pad_for_forward(prompt_ids, completion_ids, pad):
    p, pm = left_pad(prompt_ids, pad)
    t = max(map(len, completion_ids))
    c = torch.tensor([r + [pad] * (t - len(r)) for r in completion_ids])
    cm = torch.tensor([[1] * len(r) + [0] * (t - len(r)) for r in completion_ids])
    return torch.cat([p, c], 1), torch.cat([pm, cm], 1), cm, t


def test_the_cpu_default_decodes_with_the_static_engine_uncompiled(tiny_random_model_dir, tmp_path):
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    trainer = build_trainer(model, tok, tmp_path)
    assert trainer.args.generation_backend == "auto" and trainer.generation_backend == "compiled"
    trainer._generate_single_turn(prompt_batch(tok), None, {}, 4)
    assert trainer._rollout_engine is not None and not trainer._rollout_engine.compile
    assert trainer.compile_health.backend is None and trainer.compile_health.rollouts == 1


@pytest.mark.parametrize("compiled", [False, True], ids=["static", "static-compiled"])
def test_sampled_rollout_equals_trls_path_and_its_logprobs_equal_the_training_forward(tiny_random_model_dir,
                                                                                       tmp_path, compiled):
    torch._dynamo.reset()
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    spread_weights(model)
    prompts = prompt_batch(tok) * 2
    # Extra end-of-sequence ids: the token each row samples at position 3, 7 or 11 under seed 11, so that with
    # that seed every completion ends early and differently. Then a backend that drew more random
    # numbers than generate would shift the rest of the step.
    probe = StaticRollout(max_new_tokens=48, pad_token_id=tok.pad_token_id, eos_token_ids=[tok.eos_token_id])
    torch.manual_seed(11)
    rows, _ = probe.generate(model, prompts, SamplingSettings(temperature=0.9))
    stops = {r[min(3 + 4 * (i % 3), len(r) - 1)] for i, r in enumerate(rows)}
    model.generation_config.eos_token_id = [tok.eos_token_id, *stops]
    compile_args = dict(rollout_compile=True, rollout_compile_backend="eager") if compiled else {}
    trainer = build_trainer(model, tok, tmp_path, generation_backend="compiled", max_completion_length=48,
                            **compile_args)
    assert trainer.generation_backend == "compiled" and trainer.rollout_engine().compile == compiled
    torch.manual_seed(11)
    ours, logps = trainer._generate_single_turn(prompts, None, {}, 4)
    next_draw_ours = torch.rand(3)
    trainer.generation_backend = "hf"  # TRL's own generate path, same seed
    torch.manual_seed(11)
    theirs, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    assert ours == theirs  # same tokens, same EOS cut, hence the same completion mask
    # Uncompiled, the global RNG advanced alike, so the rest of the step (batch shuffling) is unchanged too.
    # Compiled, the end is read every 16 tokens: up to 15 more draws after the last row ended (not claimed).
    assert torch.equal(next_draw_ours, torch.rand(3)) != compiled
    assert all(len(r) < 48 for r in ours) and len({len(r) for r in ours}) > 1
    assert trainer.compile_health.record()["compiled_graphs"] == int(compiled) and not trainer.compile_health.fell_back

    ids, mask, completion_mask, t = pad_for_forward(prompts, ours, tok.pad_token_id)
    with torch.no_grad():
        train_logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, t)
    rollout_logps = torch.tensor([r + [0.0] * (t - len(r)) for r in logps])
    ratio = torch.exp(train_logps - rollout_logps) * completion_mask
    assert torch.allclose(ratio[completion_mask.bool()], torch.ones(()), atol=1e-4)
    assert (rollout_logps[completion_mask.bool()] < 0).all()


@pytest.mark.parametrize("compiled", [False, True], ids=["static", "static-compiled"])
def test_rollout_leaves_lora_adapter_and_base_weights_bit_identical(tiny_random_model_dir, tmp_path, compiled):
    from peft import LoraConfig

    torch._dynamo.reset()
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    model = spread_weights(model).to(torch.bfloat16)  # bf16: where any write-back of weights would show
    # bf16 SDPA on CPU needs AVX-512 kernels that the pinned avx2 numerics disable
    model.set_attn_implementation("eager")
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"],
                      task_type="CAUSAL_LM")
    compile_args = dict(rollout_compile=True, rollout_compile_backend="aot_eager") if compiled else {}
    trainer = build_trainer(model, tok, tmp_path, peft_config=lora, generation_backend="compiled", **compile_args)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    assert any(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" in n)
    torch.manual_seed(0)
    completions, _ = trainer._generate_single_turn(prompt_batch(tok), None, {}, 4)
    assert trainer._rollout_engine is not None and all(completions)
    assert not trainer.compile_health.fell_back  # the static engine made these, not TRL's fallback path
    assert trainer.compile_health.record()["compiled_graphs"] == int(compiled)
    for n, p in trainer.model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert trainer.model.training


# ---------------------------------------------------------------------- vLLM switch


def test_vllm_settings_reach_trls_config_and_a_missing_package_is_named(tmp_path, tiny_random_model_dir):
    from saah_lab.training.run import stock_grpo_kwargs, trainer_args

    cfg = make_config("tiny", generation_backend="vllm", vllm_mode="server",
                      vllm_server_base_url="http://localhost:8000")
    stock = GRPOConfig(**stock_grpo_kwargs(cfg, tmp_path, progress=False))
    ours = trainer_args(cfg, progress=False)
    for args in (stock, ours):
        assert args.use_vllm and args.vllm_mode == "server"
        assert args.vllm_server_base_url == "http://localhost:8000"
    colocate = trainer_args(make_config("tiny", generation_backend="vllm"), progress=False)
    assert colocate.use_vllm and colocate.vllm_mode == "colocate"
    assert not trainer_args(make_config("tiny"), progress=False).use_vllm

    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
        with pytest.raises(ImportError, match="'vllm' package"):
            build_trainer(model, tok, tmp_path, generation_backend="vllm")


# ---------------------------------------------------------------------- the compiled decode step
# Compiled with the eager and aot_eager backends: they run the traced graph with the same ATen ops
# (inductor would take minutes on two CPU cores); what they test is the graph itself: one per shape,
# no break, no recompile, nothing per token outside it, nothing a CUDA graph cannot capture.


@pytest.fixture
def fresh_dynamo():
    """Every test compiles the same decode function: start each with dynamo's caches empty."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def static_tensors(engine) -> list[torch.Tensor]:
    """Every tensor of every kept state (one per batch size): what a decode step may write."""
    out = []
    for cache, buffers in engine._states.values():
        for layer in cache.layers:
            out += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None),
                                getattr(layer, "cumulative_length", None)) if isinstance(t, torch.Tensor)]
        out += buffers.tensors()
    return out


def compiled_engine(max_new, eos, backend="eager", **kw):
    return StaticRollout(max_new_tokens=max_new, pad_token_id=0, eos_token_ids=eos, compile=True,
                         compile_backend=backend, **kw)


def test_compiled_sampling_draws_generates_tokens_for_a_seed(fresh_dynamo):
    model = small_qwen2()
    eos = eos_hit_early(model, PROMPTS, 40)
    torch.manual_seed(3)
    theirs = hf_completions(model, PROMPTS, 0, [eos], 40, do_sample=True, temperature=0.8, top_k=0)
    engine = compiled_engine(40, [eos], buckets=(16,))
    torch.manual_seed(3)
    ours, logps = engine.generate(model, PROMPTS, SamplingSettings(temperature=0.8))
    assert ours == theirs  # torch.multinomial's algorithm, the same random draws
    assert any(len(r) < 40 for r in ours) and len({len(r) for r in ours}) > 1
    assert engine.health.record()["compiled_graphs"] == 1


def test_compiled_greedy_equals_generate_with_a_nonzero_lora(fresh_dynamo):
    model = with_random_lora(small_qwen2())
    eos = eos_hit_early(model, PROMPTS, 20)
    theirs = hf_completions(model, PROMPTS, 0, [eos], 20, do_sample=False)
    engine = compiled_engine(20, [eos], buckets=(16,))
    ours, _ = engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))
    assert ours == theirs and any(len(r) < 20 for r in ours)


def counting_backend(graphs: list):
    """A compile backend that runs the graph eagerly and notes the shapes of each graph's tensor inputs."""
    def backend(gm, example_inputs):
        graphs.append(tuple(tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)))
        return gm.forward

    return backend


def two_bucket_prompts():
    short, long = [p[:5] for p in PROMPTS], [(p * 3)[:12] for p in PROMPTS]  # buckets 8 and 16
    assert {prompt_bucket(max(map(len, x)), (8, 16)) for x in (short, long)} == {8, 16}
    return short, long


@pytest.mark.parametrize("reserved", [False, True], ids=["bucket-by-bucket", "reserved-up-front"])
def test_prompts_of_two_buckets_compile_one_graph_once_the_cache_is_reserved(fresh_dynamo, reserved):
    model = small_qwen2()
    short, long = two_bucket_prompts()
    graphs = []
    engine = compiled_engine(12, [7], backend=counting_backend(graphs), buckets=(8, 16))
    if reserved:
        assert engine.reserve(max(map(len, short + long))) == 16 + 12  # the run's longest prompt, known up front
    engine.generate(model, short, SamplingSettings())
    engine.generate(model, long, SamplingSettings())
    addresses = [t.data_ptr() for t in static_tensors(engine)]
    for _ in range(3):  # training alternates buckets like this (GSM8K: 128 and 256)
        engine.generate(model, short, SamplingSettings())
        engine.generate(model, long, SamplingSettings())
    assert [t.data_ptr() for t in static_tensors(engine)] == addresses  # no cache rebuilt
    record = engine.health.record()
    # without a reservation the first long batch grows the cache: a second graph (what every engine did
    # before: one graph per bucket); reserved, both buckets decode in one cache length
    assert len(graphs) == (1 if reserved else 2) == record["compiled_graphs"]
    assert [(g["batch"], g["cache_len"]) for g in record["graphs"]] == [(4, 28)] if reserved else [(4, 20), (4, 28)]
    assert record["recompiles"] == 0 and record["graph_breaks"] == 0 and record["rollouts"] == 8
    assert len(engine._states) == 1 and engine.cache_len == 28  # one state per batch size


def test_short_prompts_in_a_longer_cache_decode_as_generate_does(fresh_dynamo):
    """The unused tail of a cache reserved for longer prompts changes no greedy token and no sampled draw."""
    model = small_qwen2()
    eos = eos_hit_early(model, PROMPTS, 20)
    greedy = hf_completions(model, PROMPTS, 0, [eos], 20, do_sample=False)
    torch.manual_seed(5)
    sampled = hf_completions(model, PROMPTS, 0, [eos], 20, do_sample=True, temperature=0.9, top_k=0)
    def engines():  # a greedy and a sampled step are different graphs: one engine each, as in a run
        return (StaticRollout(max_new_tokens=20, pad_token_id=0, eos_token_ids=[eos], prompt_capacity=268),
                compiled_engine(20, [eos], prompt_capacity=268))

    for engine in engines():
        assert engine.cache_len == 320 + 20 and prompt_bucket(max(map(len, PROMPTS))) == 64
        assert engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))[0] == greedy
    for engine in engines():
        torch.manual_seed(5)
        assert engine.generate(model, PROMPTS, SamplingSettings(temperature=0.9))[0] == sampled
    assert any(len(r) < 20 for r in greedy) and greedy != sampled


def test_release_frees_the_states_and_the_next_call_allocates_them_again_without_a_compile(fresh_dynamo):
    model = small_qwen2()
    graphs = []
    engine = compiled_engine(10, [7], backend=counting_backend(graphs), buckets=(16,))
    first, _ = engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))
    cache, buffers = next(iter(engine._states.values()))
    # by hand: 2 layers x (keys + values) of (4 rows, 2 KV heads, 16 + 10 slots, 12 dims) float32, the cache
    # positions, and the buffers (tokens, log-probs, mask, seen tokens, ...)
    kv = 2 * 2 * 4 * 2 * 26 * 12 * 4
    held = engine.held_bytes()
    assert held == kv + 2 * 8 + sum(t.numel() * t.element_size() for t in buffers.tensors())
    assert engine.release() == held and engine.held_bytes() == 0 and not engine._states
    assert engine.release() == 0
    again, _ = engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))
    assert again == first and engine.held_bytes() == held  # allocated again, same size
    assert len(graphs) == 1 and engine.health.record()["recompiles"] == 0  # the graph was kept


def test_an_unmerged_rollout_copies_no_base_weight():
    """No op of a rollout that keeps LoRA unmerged (the compiled engine's setting) writes a new tensor shaped like
    a base weight (what merging LoRA allocates)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class NewWeightShapedTensors(TorchDispatchMode):
        def __init__(self, shapes, storages):
            super().__init__()
            self.shapes, self.storages, self.seen = shapes, storages, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if (isinstance(t, torch.Tensor) and tuple(t.shape) in self.shapes
                        and t.untyped_storage().data_ptr() not in self.storages):  # not a view of a weight
                    self.seen.append(str(func))
            return out

    model = with_random_lora(small_qwen2())
    base = [p for n, p in model.named_parameters() if "lora_" not in n and p.dim() == 2]
    shapes = {tuple(p.shape) for p in base}
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    engine = StaticRollout(max_new_tokens=6, pad_token_id=0, eos_token_ids=[], buckets=(16,))
    engine.merge_lora = False
    with NewWeightShapedTensors(shapes, storages) as watch:
        engine.generate(model, PROMPTS, SamplingSettings())
    assert watch.seen == []
    with NewWeightShapedTensors(shapes, storages) as watch:  # the check can fail: merging copies weights
        model.merge_adapter()
    model.unmerge_adapter()
    assert watch.seen


def test_hooks_and_checkpointing_flags_do_not_reach_the_compiled_step(fresh_dynamo):
    """What TRL does between rollouts (checkpointing off and on, a new input hook each time) changes nothing."""
    model = with_random_lora(small_qwen2())
    model.gradient_checkpointing_enable()
    engine = compiled_engine(10, [7], buckets=(16,))
    for _ in range(4):
        model.gradient_checkpointing_disable()  # what TRL's generation context does
        engine.generate(model, PROMPTS, SamplingSettings())
        model.gradient_checkpointing_enable()  # ... and afterwards: one more hook on embed_tokens
    assert len(model.get_input_embeddings()._forward_hooks) >= 4
    assert engine.health.record()["compiled_graphs"] == 1


def test_a_recompile_of_a_shape_is_an_error_that_names_it(fresh_dynamo):
    from saah_lib.models.compile_health import RecompileError

    model = small_qwen2()
    engine = compiled_engine(10, [7], buckets=(16,))
    engine.generate(model, PROMPTS, SamplingSettings())
    # a hook added after compilation must run; the compiled step does not guard on modules, the engine's
    # check before each rollout sees it
    handle = model.model.layers[0].mlp.register_forward_hook(lambda module, args, out: out * 2)
    with pytest.raises(RecompileError, match=r"rollout batch 4, cache length 26: module 'model.layers.0.mlp'"):
        engine.generate(model, PROMPTS, SamplingSettings())
    assert engine.health.recompiles == 1
    handle.remove()
    engine.generate(model, PROMPTS, SamplingSettings())  # as compiled again: runs
    with pytest.raises(RecompileError, match="module '<model object>'"):  # another model of the same shape
        engine.generate(small_qwen2(), PROMPTS, SamplingSettings())


def test_switching_lora_adapters_off_after_compiling_is_an_error(fresh_dynamo):
    from saah_lib.models.compile_health import RecompileError

    model = with_random_lora(small_qwen2())
    engine = compiled_engine(6, [7], buckets=(16,))
    engine.generate(model, PROMPTS, SamplingSettings())
    with model.disable_adapter(), pytest.raises(RecompileError, match=r"module 'base_model.model.model.layers"):
        engine.generate(model, PROMPTS, SamplingSettings())


def test_decoding_state_restores_modes_flags_and_hooks_exactly():
    from saah_lib.models.rollout import decoding_state

    model = with_random_lora(small_qwen2()).train()
    model.gradient_checkpointing_enable()
    model.base_model.model.model.layers[1].eval()  # a mixed state comes back mixed
    embeddings = model.get_input_embeddings()
    user_hook = embeddings.register_forward_hook(lambda *a: None)
    before_hooks = list(embeddings._forward_hooks.items())
    before = [(m.training, getattr(m, "gradient_checkpointing", None)) for m in model.modules()]
    assert len(before_hooks) == 2  # transformers' input-gradient hook and ours
    with decoding_state(model):
        assert not any(m.training for m in model.modules())
        assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        assert list(embeddings._forward_hooks) == [user_hook.id]  # only the input-gradient hooks are detached
    assert list(embeddings._forward_hooks.items()) == before_hooks
    assert [(m.training, getattr(m, "gradient_checkpointing", None)) for m in model.modules()] == before


def test_orphaned_input_grad_hooks_are_dropped_and_the_tracked_one_kept():
    from saah_lib.models.rollout import drop_orphaned_input_grad_hooks

    model = with_random_lora(small_qwen2()).train()
    model.gradient_checkpointing_enable()
    embeddings = model.get_input_embeddings()
    for _ in range(3):  # TRL's toggling around each generation
        model.gradient_checkpointing_disable()
        model.gradient_checkpointing_enable()
    assert len(embeddings._forward_hooks) == 4
    tracked = {h.id for m in model.modules() for h in getattr(m, "_require_grads_hooks", [])}
    ids = torch.tensor([[3, 4, 5]])
    out_before = model(ids).logits
    assert drop_orphaned_input_grad_hooks(model) == 3
    assert set(embeddings._forward_hooks) == tracked and len(tracked) == 1
    out_after = model(ids).logits
    assert torch.equal(out_before, out_after) and out_after.requires_grad


def test_the_graph_is_cuda_graph_safe_and_writes_only_the_static_state(fresh_dynamo):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    captured = []

    def keep_graph(gm, example_inputs):
        captured[-1]["graph"] = gm
        return make_boxed_func(gm.forward)

    aot = aot_autograd(fw_compiler=keep_graph, keep_inference_input_mutations=True)

    def backend(gm, example_inputs):
        captured.append({"inputs": list(example_inputs)})
        return aot(gm, example_inputs)

    model = with_random_lora(small_qwen2())
    engine = compiled_engine(10, [7], backend=backend, buckets=(16,))
    engine.generate(model, PROMPTS, SamplingSettings(temperature=0.8, top_p=0.9, min_new_tokens=2,
                                                     repetition_penalty=1.1))
    (only,) = captured
    graph, inputs = only["graph"], only["inputs"]
    placeholders = graph.graph.find_nodes(op="placeholder")
    assert len(placeholders) == len(inputs) and all(isinstance(x, torch.Tensor) for x in inputs)
    assert get_first_incompatible_cudagraph_node(graph) is None  # inductor's own test before capture
    targets = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    assert not targets & {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.multinomial.default"}
    moves = [n for n in graph.graph.nodes if "device" in n.kwargs and isinstance(n.args[0], torch.fx.Node)
             and n.kwargs["device"] != n.args[0].meta["val"].device]
    assert not moves  # no copy between devices (on a GPU: no CPU tensor in the graph)

    written = set()
    for node in graph.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if schema is None or not schema.is_mutable:
            continue
        for arg, formal in zip(node.args, schema.arguments):
            if formal.alias_info is not None and formal.alias_info.is_write and arg in placeholders:
                written.add(placeholders.index(arg))
    static = {id(t) for t in static_tensors(engine)}
    assert written and all(id(inputs[i]) in static for i in written)  # KV cache and decode buffers only
    assert all(hasattr(inputs[i], "_dynamo_static_input_type") for i in written)  # fixed addresses
    cache, buffers = next(iter(engine._states.values()))
    assert {id(buffers.tokens), id(buffers.logps), id(cache.layers[0].keys)} <= {id(inputs[i]) for i in written}
    assert not {id(p) for p in model.parameters()} & {id(inputs[i]) for i in written}


@pytest.mark.slow
def test_per_token_host_syncs_and_eager_ops_counted_by_the_profiler(fresh_dynamo):
    from bench.profiling import profile_rollout

    model = small_qwen2()
    prompts, sampling = PROMPTS * 2, SamplingSettings(temperature=0.9)
    compiled = compiled_engine(48, [7], buckets=(16,))
    compiled.generate(model, prompts, sampling)  # compiles
    counts = profile_rollout(compiled, model, prompts, sampling)
    assert counts["token_steps"] == 48  # token 7 never ended every row: no early exit, all reads counted
    assert counts["host_syncs"] == 2 and counts["host_syncs_per_token"] <= 1 / 16  # after tokens 16 and 32
    assert counts["eager_ops_per_token"] <= 6
    # the same count sees the per-token work of the uncompiled engine: it can fail
    eager = StaticRollout(max_new_tokens=48, pad_token_id=0, eos_token_ids=[7], buckets=(16,))
    eager.generate(model, prompts, sampling)
    uncompiled = profile_rollout(eager, model, prompts, sampling)
    assert uncompiled["host_syncs_per_token"] > 0.5 and uncompiled["eager_ops_per_token"] > 6


def test_nan_probabilities_are_an_error_at_the_end_of_the_rollout(fresh_dynamo):
    model = small_qwen2()
    with torch.no_grad():
        model.lm_head.weight[5, 0] = float("nan")
    for engine in (compiled_engine(6, [7], buckets=(16,)),
                   StaticRollout(max_new_tokens=6, pad_token_id=0, eos_token_ids=[7], buckets=(16,))):
        with pytest.raises(ValueError, match="NaN or negative probability"):
            engine.generate(model, PROMPTS, SamplingSettings())


def test_a_cuda_graph_mode_reaches_torch_compile_as_options_beside_the_guard_filter(monkeypatch):
    """On CUDA the engine asks for ``reduce-overhead``; torch.compile refuses ``mode`` beside ``options`` (the
    first H200 run failed every compiled check so), so the mode must travel as its own options."""
    def engine():
        return StaticRollout(max_new_tokens=4, pad_token_id=0, eos_token_ids=[], compile=True,
                             compile_backend="inductor", compile_mode="reduce-overhead", name="t")

    engine()._decode_fn("cpu")  # torch.compile itself: it raised here before, it compiles nothing yet
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.update(kwargs) or fn)
    compiled = engine()
    compiled._decode_fn("cpu")
    assert seen.get("mode") is None and seen["options"]["triton.cudagraphs"] is True
    assert seen["options"]["guard_filter_fn"] is not None and compiled.health.mode == "reduce-overhead"
