"""Awaiting a partition's appends from synchronous tests (issue 27: ``Partition`` has one
awaitable method per kind of append, on every engine)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

_T = TypeVar("_T")


def completed(append: Awaitable[_T]) -> _T:
    """The result of an append on an engine that completes it at the call (the local engine):
    awaiting it must not suspend; no event loop is needed."""
    steps = append.__await__()
    try:
        steps.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"{append!r} suspended: the append was not complete at the call")


def run(start: Callable[[], Awaitable[_T]]) -> _T:
    """The result of an append on any engine: ``start()`` (the call, which takes the append's
    place in its producer's line and may start a task) made and awaited in a fresh event loop."""
    async def wait() -> Any:
        return await start()
    return asyncio.run(wait())
