"""Wall time and peak memory of a study's stages, written to ``<root>/timings.json`` as they finish, with the
machine and the CPU numerics of the study's process (each run's entry adds its worker's)."""

from __future__ import annotations

import argparse
import platform
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.numerics import RECORD_KEY, cpu_numerics_record, summary
from saah_lib.paths import in_repo, repo_relative
from saah_lib.rundir.layout import EXTENDED_TIMINGS_FILE, TIMINGS_FILE


class PeakMemory:
    """Samples this process's resident memory in a background thread."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._process = psutil.Process()

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@contextmanager
def measured():
    """``{"wall_s", "peak_rss_mb"}`` of the block, filled in as it ends."""
    cost, start = {}, time.perf_counter()
    with PeakMemory() as memory:
        yield cost
    cost.update(wall_s=round(time.perf_counter() - start, 2), peak_rss_mb=round(memory.peak / 2**20, 1))


class Timings:
    def __init__(self, path: Path):
        self.path = path
        self.record = {
            "machine": {"platform": platform.platform(), "cpus": psutil.cpu_count(),
                        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
                        RECORD_KEY: cpu_numerics_record()},
            "stages": [],
        }

    @contextmanager
    def stage(self, name: str, **info):
        print(f"\n=== {name}", flush=True)
        with measured() as cost:
            yield info
        entry = {"stage": name, **cost, **info}
        self._append(entry)
        print(f"--- {name}: {entry['wall_s']:.1f} s, peak RSS {entry['peak_rss_mb']:.0f} MB", flush=True)

    def add_stage(self, name: str, measured: dict | None) -> None:
        """A stage that ran elsewhere (an engine task, which measured its own wall time and memory)."""
        self._append({"stage": name, "wall_s": 0.0, **(measured or {})})

    def _append(self, entry: dict) -> None:
        self.record["stages"].append(entry)
        self.record["total_wall_s"] = round(sum(s["wall_s"] for s in self.record["stages"]), 2)
        atomic_write_json(self.path, self.record)


def stage_times(record: dict) -> dict[str, float]:
    """Stage -> wall seconds, with the warm start's build time where it was cached (wall 0) and a total."""
    out = {}
    for stage in record.get("stages", []):
        out[stage["stage"]] = stage["wall_s"]
        if stage["stage"] == "warm start" and stage.get("build_seconds") and stage["wall_s"] < 1:
            out["warm start (cached; its build took)"] = stage["build_seconds"]
    out["total"] = record.get("total_wall_s", sum(out.values()))
    return out


def compare_timings(paths: list[Path]) -> str:
    """A markdown table of each stage's wall time in several timings files, and each one's ratio to the first."""
    records = [read_json(Path(p)) for p in paths]
    times = [stage_times(r) for r in records]
    stages = list(dict.fromkeys(name for t in times for name in t))
    heads = [summary(r.get("machine", {}).get(RECORD_KEY)).split(";")[0] for r in records]
    columns = [f"{repo_relative(Path(p).parent)} ({h})" for p, h in zip(paths, heads, strict=True)]
    lines = ["| stage | " + " | ".join(columns) + " |",
             "| --- |" + " --- |" * len(paths)]
    for name in stages:
        cells = []
        for t in times:
            value, first = t.get(name), times[0].get(name)
            ratio = f" ({value / first:.2f}x)" if value is not None and first and t is not times[0] else ""
            cells.append("" if value is None else f"{value:.1f} s{ratio}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timings_file(path: Path) -> Path:
    """The timings file a path names: the path itself, or the one a study root holds (the mini study's
    ``timings.json``, the extended study's ``extended_timings.json``; the first that exists)."""
    if not path.is_dir():
        return path
    found = [path / name for name in (TIMINGS_FILE, EXTENDED_TIMINGS_FILE) if (path / name).is_file()]
    return found[0] if found else path / TIMINGS_FILE


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.execution.timing",
                                     description="wall time per stage of several studies, side by side")
    parser.add_argument("timings", nargs="+", type=in_repo,
                        help=f"timings files, or study roots holding one ({TIMINGS_FILE} or {EXTENDED_TIMINGS_FILE})")
    args = parser.parse_args(argv)
    paths = [timings_file(p) for p in args.timings]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no timings file: {', '.join(missing)}")
    print(compare_timings(paths))


if __name__ == "__main__":
    main()
