"""``--bootstrap-server`` takes a comma-separated list, as Kafka's tools do (found in the 20-minute
cluster run: ``oncelog transactions describe -b a,b,c`` died with a resolver traceback): the
first address that accepts is used, a dead one before it is skipped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oncelog.client import ProtocolClient
from oncelog.process import free_port


def test_a_list_skips_an_address_nobody_listens_on(broker) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with ProtocolClient(f"{dead}, {broker.bootstrap}") as c:
        assert c.versions
    with pytest.raises(OSError):
        ProtocolClient(dead, timeout=2)
    out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", "list", "--bootstrap-server",
                          f"{dead},{broker.bootstrap}", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert isinstance(json.loads(out.stdout), (list, dict))
