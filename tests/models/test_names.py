"""What a model name means and where its files are (saah_lib.models.names)."""

from saah_lib.models.names import (
    TINY_WARMSTART,
    canonical_model_name,
    model_folder_problem,
    model_location,
    offline_hub_problem,
)
from saah_lib.paths import REPO_ROOT, SHIPPED_WARM_STARTS
from saah_lib.training.config import make_config


def test_model_names_are_stored_relative_to_the_repository(tmp_path):
    assert make_config("tiny").model_name == TINY_WARMSTART
    assert canonical_model_name("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    assert canonical_model_name(str(REPO_ROOT / "docs")) == "docs"  # a folder inside the repository
    assert canonical_model_name(str(tmp_path)) == str(tmp_path.resolve())  # outside it: absolute
    assert model_location("docs") == str(REPO_ROOT / "docs")
    assert model_location("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    assert "results_dir" not in make_config("tiny", results_dir=str(tmp_path)).run_settings()


def test_the_warm_start_keeps_its_name_whatever_older_runs_called_it():
    former = "results/mini/warmstart/model"
    for name in (TINY_WARMSTART, former, str(REPO_ROOT / former), "/elsewhere/clone/" + former):
        assert canonical_model_name(name) == TINY_WARMSTART
    assert model_location(former) == str(SHIPPED_WARM_STARTS / "tiny-warmstart")  # the committed copy ships


def test_a_model_folder_must_exist_and_hold_a_model(tmp_path):
    assert model_folder_problem(TINY_WARMSTART) is None  # built on first use
    assert model_folder_problem("Qwen/Qwen2.5-3B-Instruct") is None  # the hub: checked when loaded
    assert "does not exist" in model_folder_problem(str(tmp_path / "nowhere"))
    assert "holds no model" in model_folder_problem(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert model_folder_problem(str(tmp_path)) is None


def test_a_relative_folder_that_does_not_exist_is_not_taken_for_a_hub_id():
    assert canonical_model_name("./no-such-model") == "./no-such-model"  # not "no-such-model", a hub id
    assert "model folder './no-such-model' does not exist" in model_folder_problem("./no-such-model")


def test_offline_a_hub_id_must_be_in_the_local_cache(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "the hub is offline" in offline_hub_problem("no-such-org/no-such-model")
    assert "nor a hub id" in offline_hub_problem("a/b/c")
    assert offline_hub_problem(TINY_WARMSTART) is None and offline_hub_problem(str(tmp_path)) is None
    assert offline_hub_problem("tiny-warmstart-s1") is None  # every tiny warm start is built on first use
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert offline_hub_problem("no-such-org/no-such-model") is None  # checked when downloaded


def test_warm_starts_of_other_seeds_have_their_own_name_folder_label_and_run_ids():
    from saah_lib.models.names import tiny_warm_start_label, tiny_warm_start_name, tiny_warm_start_seed
    from saah_lib.paths import CACHE

    assert tiny_warm_start_name(0) == TINY_WARMSTART and tiny_warm_start_name(3) == "tiny-warmstart-s3"
    assert [tiny_warm_start_seed(n) for n in ("tiny-warmstart", "tiny-warmstart-s3", "results/mini/warmstart/model",
                                              "tiny-warmstart-s0", "tiny-warmstart-s", "Qwen/Qwen2.5-3B")] == \
        [0, 3, 0, None, None, None]
    assert canonical_model_name("tiny-warmstart-s3") == "tiny-warmstart-s3"
    assert model_location("tiny-warmstart-s3") == str(SHIPPED_WARM_STARTS / "tiny-warmstart-s3")  # shipped
    assert model_location(TINY_WARMSTART) == str(SHIPPED_WARM_STARTS / "tiny-warmstart")
    assert model_location("tiny-warmstart-s9") == str(CACHE / "tiny-warmstart-s9")  # ships nowhere: built there
    assert model_folder_problem("tiny-warmstart-s3") is None  # built on first use, like seed 0
    assert (tiny_warm_start_label(0), tiny_warm_start_label(2)) == ("tiny", "tiny-w2")
    cfg = make_config("tiny", method="sa", alpha=0.5, seed=4, model_name="tiny-warmstart-s2")
    assert (cfg.model_label, cfg.run_id) == ("tiny-w2", "tiny-sa-a0.5-s4-w2")
    assert make_config("tiny", method="sa", alpha=0.5, seed=4).run_id == "tiny-sa-a0.5-s4"  # seed 0 unchanged
    assert make_config("tiny", model_name="tiny-warmstart-s2", model_label="mine").model_label == "mine"
    try:
        tiny_warm_start_name(-1)
    except ValueError as err:
        assert "warm-start seed" in str(err)
    else:
        raise AssertionError("a negative seed must be refused")
