"""An integrity manifest for committed results: the sha256 of every results file under a root.

``<root>/MANIFEST.json`` is ``{"algorithm": "sha256", "files": {POSIX path relative to the root: hex digest}}``,
written when a study finishes and checked before figures, the paper or the figures notebook read the root, so a
log edited or damaged on disk is caught, naming each changed, missing and extra file. It lists every file but
what the reader ignores too (:func:`saah_lib.rundir.layout.is_ignored`).

Command line::

    python -m saah_lab.rundir.manifest write results/mini
    python -m saah_lab.rundir.manifest check results/mini results/paper_reported
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from saah_lab.rundir.lock import study_lock
from saah_lab.rundir.roots import Refused, check_results_root
from saah_lib.jsonio import atomic_write_json, read_text, remove_temp_files, sha256_of  # noqa: F401 (sha256_of: callers import it from here too)
from saah_lib.paths import in_repo
from saah_lib.rundir.layout import MANIFEST_FILE, is_ignored, link_problem, symlinks

ALGORITHM = "sha256"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


class ManifestError(RuntimeError):
    """Results that do not match their manifest (or have none, or one that is not a manifest)."""


def results_files(root: str | Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every results file under ``root``, sorted by path; a symbolic link under
    it is a :class:`ManifestError` naming it (the reader refuses it too)."""
    root = Path(root)
    links = symlinks(root)
    if links:
        raise ManifestError(f"{len(links)} symbolic link(s) under {root}:\n"
                            + "\n".join(f"  {link_problem(link)}" for link in links))
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not is_ignored(rel):
            found[rel.as_posix()] = sha256_of(path)
    return found


def write_manifest(root: str | Path) -> Path:
    """Write ``<root>/MANIFEST.json`` listing every results file under ``root``, holding the root
    (:func:`~saah_lab.rundir.lock.study_lock`) so that temporary files killed writes left can be removed first."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"results root {root} does not exist")
    path = root / MANIFEST_FILE
    with study_lock(root):
        for stale in remove_temp_files(root):
            print(f"removed {stale}, left by an interrupted write", flush=True)
        atomic_write_json(path, {"algorithm": ALGORITHM, "files": results_files(root)})
    return path


def read_manifest(path: Path) -> dict[str, str]:
    """The ``files`` of a manifest, after checking its schema (a :class:`ManifestError` says what is wrong)."""
    try:
        manifest = json.loads(read_text(path))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8 (file and line named) or not JSON
        raise ManifestError(f"{path} is not a readable manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: a manifest is a JSON object, got {type(manifest).__name__}")
    if manifest.get("algorithm") != ALGORITHM:
        raise ManifestError(f"{path}: \"algorithm\" is {manifest.get('algorithm')!r}; only {ALGORITHM!r} "
                            "is written and checked")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ManifestError(f"{path}: \"files\" is {files!r}, not a mapping of relative paths to sha256 digests")
    bad = [f"{k!r}: {v!r}" for k, v in files.items() if not (isinstance(v, str) and _HEX_DIGEST.fullmatch(v))]
    if bad:
        raise ManifestError(f"{path}: \"files\" must map each path to a 64-digit hex sha256; "
                            f"{len(bad)} entries do not, e.g. {bad[0]}")
    return files


def check_manifest(root: str | Path) -> None:
    """Raise :class:`ManifestError` naming every file under ``root`` that differs from its manifest."""
    path = Path(root) / MANIFEST_FILE
    if not path.is_file():
        raise ManifestError(f"{path} not found: {root} has no integrity manifest "
                            f"(write one with `python -m saah_lab.rundir.manifest write {root}`)")
    listed, actual = read_manifest(path), results_files(root)
    diff = {"changed": sorted(p for p in listed if p in actual and actual[p] != listed[p]),
            "missing": sorted(p for p in listed if p not in actual),
            "extra": sorted(p for p in actual if p not in listed)}
    if any(diff.values()):
        lines = [f"  {kind}: {Path(root) / rel}" for kind, rels in diff.items() for rel in rels]
        raise ManifestError(
            f"the results under {root} do not match {path} "
            f"({', '.join(f'{len(v)} {k}' for k, v in diff.items() if v)}):\n" + "\n".join(lines)
            + f"\nRestore the files (e.g. `git checkout -- {root}`), or if the change is intended, rerun the "
              f"study or run `python -m saah_lab.rundir.manifest write {root}`.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.rundir.manifest", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("action", choices=("write", "check"), help="write: record every file's sha256; check: name "
                        "every changed, missing or extra file")
    parser.add_argument("roots", nargs="+", type=in_repo, help="results roots (relative: from the repository root)")
    args = parser.parse_args(argv)
    failed = False
    if args.action == "write":
        try:  # every root checked before any is written
            roots = [check_results_root(root) for root in args.roots]
        except Refused as err:
            parser.exit(1, f"error: {err}; nothing was written\n")
        for root in roots:
            print(f"wrote {write_manifest(root)}")
        return 0
    for root in args.roots:
        try:
            check_manifest(root)
            print(f"{root}: every results file matches {MANIFEST_FILE}")
        except ManifestError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
