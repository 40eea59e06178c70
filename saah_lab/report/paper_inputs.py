"""What the committed ``paper/main.pdf`` was built from, so that it can never be stale unnoticed.

``make paper`` ends with ``record``: the sha256 of every input of the PDF (``paper/main.tex``, its preamble, the
committed generated tables and the committed figures) and of the PDF itself go to ``paper/main.inputs.json``.
``check`` (and a test in ``make test``) recomputes them and names every input that changed since, every one added
or removed, and a PDF that is not the one recorded. Your own runs' outputs (``ours_*``) are never inputs.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.paths import REPO_ROOT

RECORD = Path("paper") / "main.inputs.json"
PDF = Path("paper") / "main.pdf"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def input_files(root: Path = REPO_ROOT) -> list[Path]:
    """The PDF's inputs, relative to ``root``: the TeX sources, the generated tables and texts, the figures."""
    root = Path(root)
    found = [root / "paper" / "main.tex", root / "paper" / "preamble.tex",
             *(root / "paper" / "generated").glob("*.tex"), *(root / "figures").glob("*.pdf")]
    return sorted(p.relative_to(root) for p in found if p.is_file() and not p.name.startswith("ours_"))


def current(root: Path = REPO_ROOT) -> dict:
    """The record of what is on disk now: every input's sha256, and the PDF's."""
    root = Path(root)
    return {"pdf_sha256": _sha256(root / PDF) if (root / PDF).is_file() else None,
            "inputs": {str(p): _sha256(root / p) for p in input_files(root)}}


def record(root: Path = REPO_ROOT) -> Path:
    """Write the record of the PDF just built (``make paper``)."""
    atomic_write_json(Path(root) / RECORD, current(root))
    return Path(root) / RECORD


def stale(root: Path = REPO_ROOT) -> list[str]:
    """What differs from the record, one line each (empty: the PDF is current with its inputs)."""
    root = Path(root)
    recorded = read_json(root / RECORD, default=None)
    if recorded is None:
        return [f"{RECORD} is missing: run make paper"]
    now = current(root)
    was = recorded.get("inputs", {})
    lines = [f"changed since the PDF was built: {name}" for name in sorted(was.keys() & now["inputs"].keys())
             if was[name] != now["inputs"][name]]
    lines += [f"new since the PDF was built: {name}" for name in sorted(now["inputs"].keys() - was.keys())]
    lines += [f"gone since the PDF was built: {name}" for name in sorted(was.keys() - now["inputs"].keys())]
    if recorded.get("pdf_sha256") != now["pdf_sha256"]:
        lines.append(f"{PDF} is not the PDF the record was written for")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.report.paper_inputs", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("record", "check"),
                        help="record: after building the PDF (make paper); check: name what is stale")
    args = parser.parse_args(argv)
    if args.command == "record":
        print(f"recorded the PDF's inputs in {record()}")
        return 0
    lines = stale()
    print("\n".join(lines) if lines else "paper/main.pdf is current with its inputs")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
