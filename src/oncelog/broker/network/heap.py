"""Giving freed heap memory back to the system (issue 26): ``trim()`` calls glibc's
``malloc_trim(0)``, which returns every whole free page of every malloc arena to the kernel.

Why: OpenSSL allocates its per-connection state (the SSL object, handshake and record buffers:
tens of KB) with malloc, in blocks small enough to come from glibc's heaps. When thousands of
connections close, those blocks are free but scattered among live ones, so glibc keeps the pages
(it only gives back a free tail of a heap): 2,000 stalled TLS handshakes left 120 MB behind
after they were gone. ``malloc_trim`` releases the free pages wherever they are. It walks the
heaps (a few milliseconds for hundreds of MB), so the server calls it only after many
connections have closed (server.py's sweep), never per connection.

Elsewhere than glibc (musl, macOS) ``trim()`` does nothing and returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["trim"]

_malloc_trim = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _malloc_trim = getattr(_libc, "malloc_trim", None)
        if _malloc_trim is not None:
            _malloc_trim.argtypes = [ctypes.c_size_t]
            _malloc_trim.restype = ctypes.c_int
    except OSError:  # pragma: no cover - no C library found by that name
        _malloc_trim = None


def trim() -> bool:
    """Return free heap pages to the system; True if glibc's malloc_trim ran."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True
