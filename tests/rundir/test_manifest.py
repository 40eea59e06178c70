"""Tests of saah_lab.rundir.manifest: the integrity manifest of committed results."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from saah_lab.analysis.resultset import ResultSet
from saah_lab.rundir.manifest import MANIFEST_FILE, ManifestError, check_manifest, results_files, write_manifest
from saah_lab.rundir.reader import DamagedResultsError, read_folders
from saah_lib.paths import REPO_ROOT

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


@pytest.mark.parametrize("root", ["results/mini", "results/extended", "results/paper_reported"])
def test_committed_results_match_their_manifest(root):
    assert (REPO / root / MANIFEST_FILE).is_file()
    check_manifest(REPO / root)


def test_command_line_check_fails_with_the_file_named(tmp_path):
    root = _root(tmp_path)
    ok = subprocess.run([sys.executable, "-m", "saah_lab.rundir.manifest", "write", str(root)], cwd=REPO,
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (root / "runs" / "r1" / "eval.jsonl").write_text("edited\n")
    bad = subprocess.run([sys.executable, "-m", "saah_lab.rundir.manifest", "check", str(root)], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "changed: " in bad.stderr and "eval.jsonl" in bad.stderr


@pytest.mark.parametrize("given", ["results/mini/runs/r1", "results/mini/runs", "paper/generated", "results"])
def test_manifest_write_takes_only_a_study_root(tmp_path, given, capsys):
    from saah_lab.rundir.manifest import main

    study = _root(tmp_path / "results")  # results/study/runs/r1: a study root inside a folder of studies
    study.rename(tmp_path / "results" / "mini")
    (tmp_path / "paper" / "generated").mkdir(parents=True)
    (tmp_path / "paper" / "generated" / "mini_main.tex").write_text("%")
    with pytest.raises(SystemExit) as stop:
        main(["write", str(tmp_path / given)])
    assert stop.value.code == 1 and f"{tmp_path / given} is not a study root" in capsys.readouterr().err
    assert list(tmp_path.rglob(MANIFEST_FILE)) == []
    assert main(["write", str(tmp_path / "results" / "mini")]) == 0  # the study root itself


# ---------------------------------------------------------------------------
# the manifest and the reader follow one rule (issue 22)
# ---------------------------------------------------------------------------

def _study(tmp_path, run_maker):
    root = tmp_path / "study"
    run_maker(root, "tiny-sa-s1", "tiny", "sa", 0.5, 1)
    run_maker(root, "tiny-sa-s2", "tiny", "sa", 0.5, 2)
    (root / "runs" / "tiny-sa-s1" / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (root / "runs" / "tiny-sa-s1" / "checkpoints" / "checkpoint-5" / "model.safetensors").write_bytes(b"w")
    write_manifest(root)
    return root


def _copy_run(root, where):
    shutil.copytree(root / "runs" / "tiny-sa-s2", root / "runs" / where, ignore=shutil.ignore_patterns("checkpoints"))


def test_a_run_copied_under_runs_checkpoints_is_read_and_caught_by_the_manifest(tmp_path, run_maker):
    root = _study(tmp_path, run_maker)
    _copy_run(root, "checkpoints")
    kept, flagged = read_folders(root, tolerate_problems=True)
    assert "checkpoints" in [f.path.name for f in kept]  # the tables read it (flagged: a copy of tiny-sa-s2) ...
    assert any(m.startswith(f"{root / 'runs' / 'checkpoints'}: holds run 'tiny-sa-s2'") for m in flagged)
    with pytest.raises(ManifestError, match=r"extra: .*runs/checkpoints/eval.jsonl"):
        check_manifest(root)  # ... and the manifest names every one of its files


@pytest.mark.parametrize("where", ["__pycache__", ".x", ".ipynb_checkpoints"])
def test_a_run_copied_where_the_manifest_does_not_look_is_not_read_either(tmp_path, run_maker, where):
    root = _study(tmp_path, run_maker)
    before = ResultSet.from_runs(root).summary
    _copy_run(root, where)
    check_manifest(root)  # not a result for the manifest ...
    assert [f.path.name for f in read_folders(root)[0]] == ["tiny-sa-s1", "tiny-sa-s2"]  # ... nor for the reader
    assert ResultSet.from_runs(root).summary.equals(before)


def test_every_file_the_reader_reads_is_covered_by_the_manifest(tmp_path, run_maker):
    root = _study(tmp_path, run_maker)
    _copy_run(root, "checkpoints")
    _copy_run(root, ".hidden")
    listed = results_files(root)
    for kind in ("runs", "baselines"):
        for folder in read_folders(root, kind, tolerate_problems=True)[0]:
            read = [p for p in folder.path.rglob("*") if p.is_file() and "checkpoints" not in
                    p.relative_to(folder.path).parts[:1]]
            assert read and all(p.relative_to(root).as_posix() in listed for p in read), folder.path


@pytest.mark.parametrize("content, message", [
    ({"algorithm": "md5", "files": {}}, "\"algorithm\" is 'md5'; only 'sha256'"),
    ({"files": {}}, "\"algorithm\" is None"),
    ({"algorithm": "sha256", "files": None}, "\"files\" is None, not a mapping"),
    ({"algorithm": "sha256", "files": ["runs/a"]}, "\"files\" is \\['runs/a'\\], not a mapping"),
    ({"algorithm": "sha256", "files": {"runs/a": 5}}, "each path to a 64-digit hex sha256; 1 entries do not"),
    ({"algorithm": "sha256", "files": {"runs/a": "abc"}}, "1 entries do not, e.g. 'runs/a': 'abc'"),
    (["sha256"], "a manifest is a JSON object, got list"),
])
def test_a_manifest_with_the_wrong_schema_is_a_manifest_error(tmp_path, content, message):
    root = _root(tmp_path)
    (root / MANIFEST_FILE).write_text(json.dumps(content))
    with pytest.raises(ManifestError, match=message):
        check_manifest(root)


@pytest.mark.parametrize("where", ["folder", "file", "samples"])
def test_a_symbolic_link_is_refused_by_the_manifest_and_the_reader_alike(tmp_path, run_maker, where):
    root = _study(tmp_path, run_maker)
    other = tmp_path / "elsewhere"
    shutil.copytree(root / "runs" / "tiny-sa-s1", other)
    if where == "folder":  # another run linked in as a fourth seed
        link = root / "runs" / "tiny-sa-s7"
        link.symlink_to(other, target_is_directory=True)
    elif where == "file":
        link = root / "runs" / "tiny-sa-s1" / "eval.jsonl"
        link.unlink()
        link.symlink_to(other / "eval.jsonl")
    else:
        link = root / "runs" / "tiny-sa-s1" / "eval_samples"
        shutil.rmtree(link)
        link.symlink_to(other / "eval_samples", target_is_directory=True)
    message = f"{link}: a symbolic link (to {other}"
    for action in (check_manifest, write_manifest):
        with pytest.raises(ManifestError, match=re.escape(message)):
            action(root)
    with pytest.raises(DamagedResultsError, match=re.escape(message)):
        read_folders(root)
    kept, flagged = read_folders(root, tolerate_problems=True)
    assert any(message in m for m in flagged)
    if where == "folder":
        assert "tiny-sa-s7" not in {f.path.name for f in kept}


def test_manifest_write_removes_the_temporary_files_of_killed_writes_in_its_root(tmp_path, run_maker):
    root = _study(tmp_path, run_maker)
    left = [root / ".MANIFEST.json.a1b2c3d4e5f6.tmp", root / ".timings.json.0f0f0f0f0f0f.tmp"]
    for path in left:
        path.write_text("half")
    kept = root / ".notes"
    kept.write_text("not a temporary file")
    write_manifest(root)
    assert not any(path.exists() for path in left) and kept.exists()
    check_manifest(root)


def test_temporary_files_in_results_roots_are_ignored_by_git():
    probes = ["results/mini/.MANIFEST.json.a1b2c3d4e5f6.tmp", "results/extended/runs/x/.eval.jsonl.abc.tmp",
              "results/paper_reported/.study.lock", "results/mini/runs/x/.run.lock"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=REPO, capture_output=True,
                             text=True).stdout.split()
    assert ignored == probes
