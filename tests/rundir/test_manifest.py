"""Tests of saah_lib.rundir.manifest: the integrity manifest of committed results."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from saah_lib.paths import REPO_ROOT
from saah_lib.rundir.manifest import MANIFEST_FILE, ManifestError, check_manifest, write_manifest

REPO = REPO_ROOT


def _root(tmp_path):
    root = tmp_path / "study"
    (root / "runs" / "r1" / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (root / "runs" / "r1" / "eval.jsonl").write_text('{"step": 0, "pass_at_1": 0.3}\n')
    (root / "runs" / "r1" / "config.json").write_text("{}\n")
    (root / "runs" / "r1" / "checkpoints" / "checkpoint-2" / "model.safetensors").write_bytes(b"weights")
    (root / "runs" / "r1" / ".eval.jsonl.123.tmp").write_text("half")
    return root


def test_manifest_lists_results_files_with_relative_paths(tmp_path):
    root = _root(tmp_path)
    manifest = json.loads(write_manifest(root).read_text())
    assert sorted(manifest["files"]) == ["runs/r1/config.json", "runs/r1/eval.jsonl"]
    assert all(not Path(p).is_absolute() for p in manifest["files"])
    check_manifest(root)  # unchanged: no error


def test_check_names_each_changed_missing_and_extra_file(tmp_path):
    root = _root(tmp_path)
    write_manifest(root)
    (root / "runs" / "r1" / "eval.jsonl").write_text('{"step": 0, "pass_at_1": 0.9}\n')  # hand-edited
    (root / "runs" / "r1" / "config.json").unlink()
    (root / "runs" / "r2").mkdir()
    (root / "runs" / "r2" / "eval.jsonl").write_text("{}\n")
    with pytest.raises(ManifestError) as err:
        check_manifest(root)
    msg = str(err.value)
    assert "1 changed, 1 missing, 1 extra" in msg
    assert "changed: " + str(root / "runs/r1/eval.jsonl") in msg
    assert "missing: " + str(root / "runs/r1/config.json") in msg
    assert "extra: " + str(root / "runs/r2/eval.jsonl") in msg


def test_a_root_without_manifest_is_an_error(tmp_path):
    with pytest.raises(ManifestError, match="no integrity manifest"):
        check_manifest(_root(tmp_path))


@pytest.mark.parametrize("root", ["results/mini", "results/paper_reported"])
def test_committed_results_match_their_manifest(root):
    assert (REPO / root / MANIFEST_FILE).is_file()
    check_manifest(REPO / root)


def test_command_line_check_fails_with_the_file_named(tmp_path):
    root = _root(tmp_path)
    ok = subprocess.run([sys.executable, "-m", "saah_lib.rundir.manifest", "write", str(root)], cwd=REPO,
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (root / "runs" / "r1" / "eval.jsonl").write_text("edited\n")
    bad = subprocess.run([sys.executable, "-m", "saah_lib.rundir.manifest", "check", str(root)], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "changed: " in bad.stderr and "eval.jsonl" in bad.stderr
