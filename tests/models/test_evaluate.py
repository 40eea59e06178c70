import pytest
import torch

from saah_lib.models.evaluate import evaluate_pass_at_1, greedy_completions
from saah_lib.models.loading import load_for_eval, load_model_and_tokenizer
from saah_lib.tasks.problems import Problem
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.scoring import pass_at_1_ci, score_completions
from saah_lib.tasks.synthetic import generate_problems


def test_confidence_interval_formula():
    assert pass_at_1_ci(0.637, 500) == pytest.approx(0.0421, abs=5e-5)  # the paper's 1.5B baseline
    assert pass_at_1_ci(0.0, 10) == 0.0


def test_scoring_uses_the_exact_match_rule():
    problems = [Problem("a", "q", "18"), Problem("b", "q", "5"), Problem("c", "q", "7")]
    completions = ["<SOLUTION>18.0</SOLUTION>", "<SOLUTION>5.4</SOLUTION>", "no idea"]
    result = score_completions(problems, completions)
    assert [r["correct"] for r in result.records] == [True, False, False]
    assert [r["extracted"] for r in result.records] == ["18", "5.4", None]
    assert result.pass_at_1 == pytest.approx(1 / 3) and result.n == 3 and result.n_correct == 1


def test_batched_left_padded_greedy_equals_one_at_a_time(tiny_random_model_dir):
    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(str(tiny_random_model_dir))
    # prompts of different lengths, so that batching needs padding
    problems = generate_problems(6, seed=3, min_steps=1, max_steps=3)
    prompts = [make_prompt(p.question, tokenizer) for p in problems]
    assert len({len(tokenizer(p)["input_ids"]) for p in prompts}) > 1
    batched = greedy_completions(model, tokenizer, prompts, max_new_tokens=20, batch_size=6, progress=False)
    single = [greedy_completions(model, tokenizer, [p], max_new_tokens=20, batch_size=1, progress=False)[0]
              for p in prompts]
    assert batched == single
    assert any(batched)


def test_generation_restores_training_mode(tiny_random_model_dir):
    model, tokenizer = load_model_and_tokenizer(str(tiny_random_model_dir))
    model.train()
    greedy_completions(model, tokenizer, ["hi"], max_new_tokens=2, progress=False)
    assert model.training


def test_standalone_evaluation_of_a_model_folder(tiny_random_model_dir):
    model, tokenizer = load_for_eval(tiny_random_model_dir)
    result = evaluate_pass_at_1(model, tokenizer, generate_problems(4, seed=1), max_new_tokens=8, progress=False)
    assert result.n == 4 and len(result.records) == 4


def test_missing_model_gives_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="could not load model.*hub"):
        load_model_and_tokenizer(str(tmp_path / "nothing-here"))
