"""The committed studies' warm starts ship (results/warm_starts) with the bits their studies recorded, and runs
load them: a rerun on any CPU trains from the same starting model."""

import shutil

import pytest

from saah_lib.jsonio import read_json, sha256_of
from saah_lib.models import loading, names
from saah_lib.models.warmstart import cache_problem
from saah_lib.paths import CONFIRM_ROOT, EXTENDED_ROOT, MINI_ROOT, SHIPPED_WARM_STARTS, tiny_warmstart_dir

STUDY_RECORDS = [MINI_ROOT / "warmstart_build.json", EXTENDED_ROOT / "warmstart_builds.json",
                 CONFIRM_ROOT / "warmstart_builds.json"]


def recorded_weights() -> dict[str, str]:
    """Warm-start name -> the weights' sha256, from every committed study's records."""
    out = {}
    for path in STUDY_RECORDS:
        record = read_json(path)
        entries = {"tiny-warmstart": record} if path.name == "warmstart_build.json" else record
        for name, entry in entries.items():
            assert out.setdefault(name, entry["weights_sha256"]) == entry["weights_sha256"], name
    return out


def test_every_warm_start_a_committed_study_recorded_ships_with_the_recorded_weights():
    recorded = recorded_weights()
    assert len(recorded) == 8  # tiny-warmstart, -s1 (extended), -s2 ... -s7 (confirm)
    shipped = sorted(p.name for p in SHIPPED_WARM_STARTS.iterdir() if p.is_dir())
    assert shipped == sorted(recorded)
    for name, digest in recorded.items():
        folder = SHIPPED_WARM_STARTS / name
        assert cache_problem(folder) is None, name  # every file as its files.json records
        assert sha256_of(folder / "model.safetensors") == digest, name


def test_runs_load_the_shipped_copy_and_its_build_is_a_check_of_its_own():
    assert loading.resolve_model("tiny-warmstart", progress=False) == str(SHIPPED_WARM_STARTS / "tiny-warmstart")
    assert names.model_location("tiny-warmstart-s3") == str(SHIPPED_WARM_STARTS / "tiny-warmstart-s3")
    assert tiny_warmstart_dir(0) != SHIPPED_WARM_STARTS / "tiny-warmstart"  # builds go to the cache


def test_a_damaged_shipped_copy_is_an_error_that_says_how_to_restore_it(tmp_path, monkeypatch):
    copy = tmp_path / "tiny-warmstart"
    shutil.copytree(SHIPPED_WARM_STARTS / "tiny-warmstart", copy)
    (copy / "model.safetensors").write_bytes(b"torn")
    monkeypatch.setattr(names, "shipped_warm_start_dir", lambda seed: tmp_path / "tiny-warmstart")
    with pytest.raises(RuntimeError, match="is damaged .*git checkout --"):
        loading.resolve_model("tiny-warmstart", progress=False)


def test_a_warm_start_that_ships_nowhere_is_built_in_the_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(names, "shipped_warm_start_dir", lambda seed: tmp_path / "absent")
    built = []
    monkeypatch.setattr(loading, "build_warm_start", lambda folder, seed, progress: built.append(seed) or folder)
    assert loading.resolve_model("tiny-warmstart-s9", progress=False) == str(tiny_warmstart_dir(9))
    assert built == [9]
