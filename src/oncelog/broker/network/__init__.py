"""The network entrance: listeners (``listeners.py``: one per configured address, with its
security protocol), the asyncio server and its per-connection loop (``server.py``,
``connection.py``: framing, size bounds, timeouts, backpressure, in-order answers), the
dispatcher (``dispatch.py``: decode, route, the one error boundary, encode) and ``heap.py``
(freeing heap pages after many connections close).

May import: oncelog's pure layers, the root's ``context``, ``routes`` and ``pipelining``,
broker/configuration, broker/auth and broker/handlers (ApiVersions' error answer). Only the
broker (root) imports it.
"""
