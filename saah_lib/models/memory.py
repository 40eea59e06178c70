"""Returning a CPU step's freed buffers to the system: glibc's ``mallopt(M_MMAP_THRESHOLD)``.

On a CPU, a training step allocates and frees many buffers of megabytes (activations, LM-head tiles). glibc's
allocator raises its mmap threshold as large blocks are freed (up to 32 MiB), so later buffers of that size come
from its heap, and the heap keeps what is freed: the process's RSS grows by gigabytes above the tensors alive.
A fixed threshold makes every allocation of that size or more a mapping of its own, unmapped when freed. It is
what ``MALLOC_MMAP_THRESHOLD_`` in the environment does at a process's start, done from inside the process (it
acts on the allocations made after the call).
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt`` (malloc.h).
M_MMAP_THRESHOLD = -3
#: 2 MiB: a step's activation and logit buffers are larger; small tensors stay in the heap, which is faster.
DEFAULT_THRESHOLD = 2 * 2**20


def return_freed_buffers(threshold_bytes: int = DEFAULT_THRESHOLD) -> bool:
    """From now on, allocations of ``threshold_bytes`` or more get their own mapping, returned to the system when
    freed (glibc only).  Returns whether the allocator took the setting: False where the C library is not glibc
    (macOS, musl), which is left as it is.  Process-wide and not undone: call it once, before training."""
    if not isinstance(threshold_bytes, int) or not 0 < threshold_bytes <= 2**25:
        raise ValueError(f"threshold_bytes must be a whole number of bytes from 1 to 32 MiB, got {threshold_bytes!r}")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    try:
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own symbol: another libc's mallopt differs)
    except AttributeError:
        return False
    return mallopt(M_MMAP_THRESHOLD, threshold_bytes) == 1
