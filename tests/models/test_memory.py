"""A CPU step's freed buffers go back to the system once return_freed_buffers is called (glibc)."""

import os
import subprocess
import sys

import pytest

from saah_lib.models.memory import return_freed_buffers
from saah_lib.paths import REPO_ROOT

# 100 buffers of 4 MB, then every other one freed. glibc raised its mmap threshold when the first 4 MB buffer
# was freed, so without the call the buffers come from its heap; each freed one lies between two that stay alive
# (the last one, next to the heap's top, stays), so the heap cannot trim it. With the call each is a mapping.
PROGRAM = """
import sys, torch
from saah_lib.models.memory import return_freed_buffers
if sys.argv[1] == "call":
    assert return_freed_buffers()
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
torch.ones(1_000_000)
buffers = [torch.ones(1_000_000) for _ in range(100)]
with_all = rss_mib()
del buffers[0::2]
print(50 * 4e6 / 2**20 - (with_all - rss_mib()))  # MiB freed and not returned
"""


def kept_mib(mode: str) -> float:
    # a clean environment: glibc's dynamic threshold is off once any MALLOC_* setting reaches the process, and the
    # tests before this one in the same worker may leave settings behind
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True, env=env)
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_buffers_are_returned_after_the_call_and_kept_without_it():
    assert kept_mib("leave") > 150  # 191 MiB freed, kept by the heap
    assert kept_mib("call") < 20


def test_a_threshold_out_of_range_is_refused():
    for bad in (0, -1, 2**26, 2.5, "2MiB"):
        with pytest.raises(ValueError, match="threshold_bytes"):
            return_freed_buffers(bad)
