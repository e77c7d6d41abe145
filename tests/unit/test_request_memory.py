"""The request memory (``queued.max.request.bytes``, broker/network/request_memory.py) and the
connections that take from it (connection.py): one bound for all connections, a frame admitted
while any bytes are left, waiting connections served in the order they asked, small frames in a
headroom, everything given back when a connection closes."""

from __future__ import annotations

import asyncio
import struct

from oncelog.broker.network.connection import Connection
from oncelog.broker.network.request_memory import SMALL_FRAME, TRIM_AFTER_BYTES, RequestMemory
from test_connection_receive_timeout import _Transport

MIB = 1 << 20


def _frame(n: int) -> bytes:
    return struct.pack(">i", n) + b"x" * n


def test_a_frame_is_admitted_while_any_bytes_are_left_and_waiters_are_served_in_order() -> None:
    pool = RequestMemory(10 * MIB)
    assert pool.take(8 * MIB) and pool.take(8 * MIB)  # the second overdraws: admitted, 16 of 10 used
    assert not pool.take(1 * MIB)  # none left
    got: list[str] = []
    pool.wait("a", 4 * MIB, lambda: got.append("a"))
    pool.wait("b", 4 * MIB, lambda: got.append("b"))
    pool.wait("c", 4 * MIB, lambda: got.append("c"))
    pool.cancel("b")  # its connection closed
    assert not pool.take(SMALL_FRAME + 1)  # a large frame never goes before those who wait
    pool.give(8 * MIB)  # 8 used: "a" gets its 4 (12 used, none left), "c" waits on
    assert got == ["a"] and pool.used == 12 * MIB and pool.waiting == 1
    pool.give(8 * MIB)
    assert got == ["a", "c"] and pool.used == 8 * MIB and pool.waiting == 0


def test_small_frames_have_a_headroom_past_a_used_up_pool() -> None:
    pool = RequestMemory(16 * MIB)
    assert pool.take(20 * MIB)
    assert not pool.take(SMALL_FRAME + 1)
    taken = 0
    while pool.take(SMALL_FRAME):  # an eighth of the pool, in small frames
        taken += SMALL_FRAME
        assert taken <= 2 * MIB
    assert taken == 0  # 20 of 16 used: past the headroom too
    pool.give(20 * MIB)
    assert pool.take(15 * MIB)
    assert pool.take(SMALL_FRAME)  # 15 + 64 KiB: still under the pool
    assert pool.take(MIB)  # admitted: bytes were left (16 MiB + 64 KiB used now)
    assert pool.take(SMALL_FRAME)  # the pool is used up; the headroom takes a small one
    assert not pool.take(MIB)


def test_an_unbounded_pool_counts_and_never_refuses() -> None:
    pool = RequestMemory(-1)
    assert pool.capacity is None and pool.take(10**12) and pool.used == 10**12


def test_a_trim_is_due_once_after_a_high_mark_drains() -> None:
    pool = RequestMemory(None)
    pool.take(TRIM_AFTER_BYTES)
    assert not pool.trim_due()
    pool.give(TRIM_AFTER_BYTES - 1)
    assert pool.trim_due() and not pool.trim_due()
    pool.take(MIB)
    pool.give(MIB)
    assert not pool.trim_due()  # a small high mark: nothing worth trimming


def test_connections_wait_for_request_memory_and_give_it_back() -> None:
    async def go() -> None:
        pool = RequestMemory(MIB)
        a, b = Connection(lambda c: None, 10 * MIB, pool), Connection(lambda c: None, 10 * MIB, pool)
        ta, tb = _Transport(), _Transport()
        a.connection_made(ta)
        b.connection_made(tb)
        a.data_received(_frame(2 * MIB))  # admitted whole (bytes were left), the pool is used up
        assert len(a.frames) == 1 and pool.used == 2 * MIB and not ta.paused
        b.data_received(_frame(SMALL_FRAME + 1)[:100])  # a large frame begins: b waits, reading paused
        assert tb.paused and b.reading_paused and not b.frames and pool.waiting == 1
        b.data_received(_frame(SMALL_FRAME + 1)[100:])  # what was in flight is kept, not cut
        assert not b.frames
        frame = await a.next_frame()  # the serving task took a's frame ...
        assert frame is not None
        a.release(len(frame))  # ... and handled it: b gets its bytes and reads on
        await asyncio.sleep(0)
        assert len(b.frames) == 1 and not tb.paused and pool.used == SMALL_FRAME + 1
        # a connection that closes gives back what it queued and what it was reading
        b.data_received(_frame(1000)[:10])
        assert pool.used == SMALL_FRAME + 1 + 1000
        b.connection_lost(None)
        assert pool.used == 0
        # and one waiting in line leaves the line
        assert pool.take(2 * MIB)
        c = Connection(lambda c: None, 10 * MIB, pool)
        c.connection_made(_Transport())
        c.data_received(_frame(SMALL_FRAME + 1)[:10])
        assert pool.waiting == 1
        c.connection_lost(None)
        assert pool.waiting == 0 and pool.used == 2 * MIB

    asyncio.run(go())
