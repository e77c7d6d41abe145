"""Giving freed memory back to the system (issue 26): ``trim()`` calls glibc's
``malloc_trim(0)``, which returns every whole free page of every malloc arena to the kernel;
``collect_and_trim()`` first runs a full collection of Python's cyclic garbage collector.

Why trim: OpenSSL allocates its per-connection state (the SSL object, handshake and record
buffers: tens of KB) with malloc, in blocks small enough to come from glibc's heaps. When
thousands of connections close, those blocks are free but scattered among live ones, so glibc
keeps the pages (it only gives back a free tail of a heap): 2,000 stalled TLS handshakes left
120 MB behind after they were gone. ``malloc_trim`` releases the free pages wherever they are.
It walks the heaps (a few milliseconds for hundreds of MB), so the server calls it only after
many connections have closed, or after the request memory drained from a high mark
(server.py's sweep), never per connection.

Why collect first: what is left after a connection closes is not all in glibc's free pages.
The interpreter keeps free lists of small objects (up to 2,000 tuples of each small size, the
(host, port) pairs and callback arguments of thousands of connections among them) and its small
object allocator gives an arena (256 KiB) back only when nothing in it is alive: a few freed
tuples waiting in a free list pin whole arenas. A full collection empties the free lists (and
frees any cycle still waiting), so the arenas go, and the trim after it returns their pages:
9,000 closed TLS connections kept 39 MB after a trim alone, 15 MB after both. A full collection
walks every object of the process (tens of milliseconds in a large broker), so the server runs
it at most every ``COLLECT_EVERY_S``.

Elsewhere than glibc (musl, macOS) ``trim()`` does nothing and returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

__all__ = ["COLLECT_EVERY_S", "collect_and_trim", "trim"]

#: the server runs ``collect_and_trim`` at most this often (seconds)
COLLECT_EVERY_S = 5.0

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


def collect_and_trim() -> bool:
    """A full garbage collection (free lists emptied, cycles freed), then ``trim()``."""
    gc.collect()
    return trim()
