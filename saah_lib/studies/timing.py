"""Wall time and peak memory of a study's stages, written to ``<root>/timings.json`` as they finish."""

from __future__ import annotations

import platform
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from saah_lib.jsonio import atomic_write_json


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


class Timings:
    def __init__(self, path: Path):
        self.path = path
        self.record = {
            "machine": {"platform": platform.platform(), "cpus": psutil.cpu_count(),
                        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)},
            "stages": [],
        }

    @contextmanager
    def stage(self, name: str, **info):
        print(f"\n=== {name}", flush=True)
        start = time.perf_counter()
        with PeakMemory() as memory:
            yield info
        entry = {"stage": name, "wall_s": round(time.perf_counter() - start, 2),
                 "peak_rss_mb": round(memory.peak / 2**20, 1), **info}
        self.record["stages"].append(entry)
        self.record["total_wall_s"] = round(sum(s["wall_s"] for s in self.record["stages"]), 2)
        atomic_write_json(self.path, self.record)
        print(f"--- {name}: {entry['wall_s']:.1f} s, peak RSS {entry['peak_rss_mb']:.0f} MB", flush=True)
