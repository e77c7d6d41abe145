"""The one HOST:PORT parser (oncelog/hostport.py, issue 27): the forms the client, the broker's
--listen, the listeners and the HTTP side doors accept, and what they refuse."""

from __future__ import annotations

import pytest

from oncelog.broker.network import listeners
from oncelog.hostport import parse_host_port, parse_listen
from oncelog.protocol.errors import InvalidConfig


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9092", ("127.0.0.1", 9092)),
    ("broker.example:0", ("broker.example", 0)),
    ("[::1]:9092", ("::1", 9092)),
    (" localhost:65535 ", ("localhost", 65535)),
    (":9093", ("", 9093)),  # every interface (a listener's empty host)
    ("::1:9092", ("::1", 9092)),  # a bare IPv6 address: up to the last colon
])
def test_accepted_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["nonsense", "host:", "host:70000", "host:x", "host:-1", "[::1]9092", "[::1",
                                  "a/b:9092", "a b:9092", "[x]]:1"])
def test_refused_forms(text: str) -> None:
    with pytest.raises(ValueError):
        parse_host_port(text)


def test_listen_addresses_name_their_host() -> None:
    assert parse_listen("0.0.0.0:9308") == ("0.0.0.0", 9308)
    with pytest.raises(ValueError):
        parse_listen(":9308")


def test_listeners_use_it_and_refuse_as_config_errors() -> None:
    assert listeners.parse_endpoints("PLAINTEXT://127.0.0.1:9092,CLIENT://:9093,SSL://[::1]:9094", "listeners") == [
        ("PLAINTEXT", "127.0.0.1", 9092), ("CLIENT", "", 9093), ("SSL", "::1", 9094)]
    for bad in ("PLAINTEXT://127.0.0.1", "PLAINTEXT://h:70000", "127.0.0.1:9092", "P://a/b:1"):
        with pytest.raises(InvalidConfig, match="is not NAME://HOST:PORT"):
            listeners.parse_endpoints(bad, "listeners")
