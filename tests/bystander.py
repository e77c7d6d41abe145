"""A bystander: an innocent client whose latencies show what a hostile client costs everyone
else (R22). Shared by the hostile-input tests (tests/integration/test_hostile_clients.py,
test_hostile_requests.py, test_data_dir_safety.py, test_fuzz_broker.py)."""

from __future__ import annotations

import threading
import time

from oncelog.client import ProtocolClient
from oncelog.protocol import apis


class Bystander:
    """An innocent client doing ApiVersions round trips in a thread; records each latency."""

    def __init__(self, bootstrap: str, security: dict[str, str] | None = None) -> None:
        """``security``: the client properties of a TLS / SASL listener (ProtocolClient's)."""
        self.client = ProtocolClient(bootstrap, timeout=120, security=security)
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        req = apis.message_class(apis.API_VERSIONS, 3, False)(client_software_name="b", client_software_version="1")
        for _ in range(100_000):  # bounded; stopped long before
            if self._stop.is_set():
                return
            t0 = time.monotonic()
            self.client.request(apis.API_VERSIONS, req, version=3)
            self.latencies.append(time.monotonic() - t0)
            time.sleep(0.01)

    def __enter__(self) -> "Bystander":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=150)
        self.client.close()

    @property
    def worst(self) -> float:
        return max(self.latencies, default=float("inf"))
