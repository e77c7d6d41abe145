"""Pure parts of the connector: offsets (canonical JSON, admission control) and options.
No Spark, no broker: milliseconds."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.spark import offsets as off
from oncelog.spark.options import SinkOptions, SourceOptions

BS = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def test_canonical_json_orders_topics_and_partitions_numerically() -> None:
    a = {("b", 10): 5, ("a", 2): 1, ("b", 9): 3, ("a", 10): 0}
    b = dict(reversed(list(a.items())))
    assert off.dumps(a) == off.dumps(b) == '{"a": {"2": 1, "10": 0}, "b": {"9": 3, "10": 5}}'
    assert off.from_json_dict(json.loads(off.dumps(a))) == a


@given(st.dictionaries(st.tuples(st.sampled_from("xyz"), st.integers(0, 20)), st.integers(0, 10**6), max_size=12))
def test_json_round_trip_is_stable(offsets) -> None:
    text = off.dumps(offsets)
    assert off.dumps(off.from_json_dict(json.loads(text))) == text


def test_starting_offsets_option() -> None:
    assert off.parse_offsets_option("Earliest", name="s") == "earliest"
    assert off.parse_offsets_option('{"t": {"0": -2, "1": 7}}', name="s") == {("t", 0): -2, ("t", 1): 7}
    with pytest.raises(ValueError, match="startingOffsets"):
        off.parse_offsets_option("{bad", name="startingOffsets")
    with pytest.raises(ValueError, match="-5"):
        off.parse_offsets_option('{"t": {"0": -5}}', name="s")


def test_resolve_uses_earliest_and_latest_and_defaults_missing_partitions() -> None:
    tps = [("t", 0), ("t", 1), ("t", 2)]
    earliest = {tp: 10 for tp in tps}
    latest = {tp: 100 for tp in tps}
    spec = {("t", 0): off.LATEST, ("t", 1): 42}
    assert off.resolve(spec, tps, earliest, latest, default="earliest") == {("t", 0): 100, ("t", 1): 42, ("t", 2): 10}
    assert off.resolve("latest", tps, earliest, latest, default="earliest") == latest


def test_rate_limit_shares_in_proportion_and_never_starves_a_partition() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 2, ("t", 2): 100}
    end = off.rate_limit(start, latest, 100)
    assert end[("t", 2)] == 100  # no backlog: stays
    assert end[("t", 1)] == 1  # share 0.22 rounds up to 1
    assert end[("t", 0)] == 99  # share 99.7 rounds down
    assert off.rate_limit(start, latest, 10_000) == {("t", 0): 900, ("t", 1): 2, ("t", 2): 100}


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    st.integers(1, 3000),
)
def test_rate_limit_bounds(pairs, limit) -> None:
    start = {("t", i): min(a, b) for i, (a, b) in enumerate(pairs)}
    latest = {("t", i): max(a, b) for i, (a, b) in enumerate(pairs)}
    end = off.rate_limit(start, latest, limit)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
    # Rounding a share below one up may exceed the limit by at most one offset per partition.
    assert off.total_offsets(start, end) <= limit + len(latest)
    if off.total_offsets(start, latest) > 0:
        assert off.total_offsets(start, end) > 0, "a batch with backlog made no progress"


def test_source_options_like_sparks_kafka_connector() -> None:
    o = SourceOptions.parse({**BS, "subscribe": "b, a", "maxOffsetsPerTrigger": "5", "kafka.fetch.max.bytes": "1000"}, streaming=True)
    assert o.subscribe == ("a", "b") and o.starting == "latest" and o.max_offsets_per_trigger == 5
    conf = o.consumer_config()
    assert conf["isolation.level"] == "read_committed"  # the default: never read aborted data
    assert conf["fetch.max.bytes"] == "1000" and conf["enable.auto.commit"] == "false"
    assert conf["auto.offset.reset"] == "error"  # failOnDataLoss=true
    assert "fetch.max.bytes" not in o.admin_config()

    b = SourceOptions.parse({**BS, "assign": '{"t": [1, 0]}', "endingOffsets": '{"t": {"0": 5, "1": -1}}'}, streaming=False)
    assert b.assign == (("t", 0), ("t", 1)) and b.starting == "earliest"

    for bad, match in [
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "enable.auto.commit"),
        ({"subscribe": "a", "kafka.isolation.level": "dirty"}, "isolation"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "endingOffsets": "latest"}, "batch queries only"),
    ]:
        with pytest.raises(ValueError, match=match):
            SourceOptions.parse({**BS, **bad}, streaming=True)
    with pytest.raises(ValueError, match="bootstrap"):
        SourceOptions.parse({"subscribe": "a"}, streaming=True)


def test_sink_options() -> None:
    s = SinkOptions.parse({**BS, "topic": "o", "delivery.guarantee": "exactly-once"})
    assert s.guarantee == "exactly_once" and s.producer_config()["enable.idempotence"] == "true"
    with pytest.raises(ValueError, match="transactional.id"):
        SinkOptions.parse({**BS, "kafka.transactional.id": "x"})
    with pytest.raises(ValueError, match="delivery.guarantee"):
        SinkOptions.parse({**BS, "delivery.guarantee": "maybe"})


def test_the_sink_is_exactly_once_unless_at_least_once_is_asked_for() -> None:
    """Issue 13: the obvious code gets exactly once; at-least-once is the opt-in. Spark's Kafka
    sink options keep working as they are."""
    spark_kafka_sink = {**BS, "topic": "o", "kafka.linger.ms": "20", "kafka.compression.type": "lz4"}
    s = SinkOptions.parse(spark_kafka_sink)
    assert s.guarantee == "exactly_once"
    assert (s.topic, s.producer_config()["linger.ms"], s.producer_config()["compression.type"]) == ("o", "20", "lz4")
    for spelled in ("at_least_once", "at-least-once", "AT_LEAST_ONCE"):
        assert SinkOptions.parse({**spark_kafka_sink, "delivery.guarantee": spelled}).guarantee == "at_least_once"
    assert SinkOptions.parse({**BS, "Delivery.Guarantee": "Exactly-Once"}).guarantee == "exactly_once"


def test_a_batch_write_needs_a_write_id_in_exactly_once_mode_and_says_what_to_set() -> None:
    with pytest.raises(ValueError, match="writeId") as info:
        SinkOptions.parse({**BS, "topic": "o"}).check_batch_write()
    assert "delivery.guarantee" in str(info.value) and "at_least_once" in str(info.value)
    assert SinkOptions.parse({**BS, "topic": "o", "writeId": "nightly"}).check_batch_write().write_id == "nightly"
    alo = SinkOptions.parse({**BS, "topic": "o", "delivery.guarantee": "at_least_once"})
    assert alo.check_batch_write() is alo


def test_every_client_of_the_connector_skips_re_bootstrapping_unless_told_otherwise() -> None:
    """librdkafka #5511/#5456 (issue 13): a re-bootstrap after the only broker restarted leaves
    coordinator requests waiting forever. A ``kafka.*`` option still overrides the default."""
    src = SourceOptions.parse({**BS, "subscribe": "a"}, streaming=True)
    sink = SinkOptions.parse({**BS, "topic": "o"})
    for conf in (src.consumer_config(), src.admin_config(), sink.producer_config()):
        assert conf["metadata.recovery.strategy"] == "none" and conf["reconnect.backoff.max.ms"] == "1000"
    assert SinkOptions.parse({**BS, "kafka.metadata.recovery.strategy": "rebootstrap"}).producer_config()[
        "metadata.recovery.strategy"] == "rebootstrap"
    assert SinkOptions.parse({**BS, "requestTimeoutMs": "5000"}).request_timeout_ms == 5000
    with pytest.raises(ValueError, match="requestTimeoutMs"):
        SinkOptions.parse({**BS, "requestTimeoutMs": "0"})


def test_fault_injection_fires_once_per_point_and_batch(tmp_path, monkeypatch) -> None:
    from oncelog.spark import faults

    armed = tmp_path / "armed"
    monkeypatch.setenv(faults.ENV, str(armed))
    faults.maybe_fire("before_commit", 1)  # not armed: nothing
    faults.arm(armed, "before_commit:fail@1, driver_commit:hang", tmp_path)
    assert faults.parse("before_commit:fail@1, driver_commit:hang") == (
        faults.Fault("before_commit", "fail", 1), faults.Fault("driver_commit", "hang", None))
    faults.maybe_fire("before_commit", 0)  # another batch: nothing
    faults.maybe_fire("after_commit", 1)  # another point: nothing
    with pytest.raises(faults.InjectedFault, match="before_commit in batch 1"):
        faults.maybe_fire("before_commit", 1)
    faults.maybe_fire("before_commit", 1)  # fired already (the file says so)
    assert (tmp_path / "before_commit@1").read_text().startswith("before_commit fail batch 1 pid ")
    for bad, match in [("later:fail", "not <point>"), ("before_commit:explode", "not <point>"), ("after_commit@x", "batch id")]:
        with pytest.raises(ValueError, match=match):
            faults.arm(armed, bad, tmp_path)
    faults.disarm(armed)
    faults.maybe_fire("driver_commit", 3)  # disarmed: nothing


def test_fault_injection_is_not_a_sink_option() -> None:
    """A test hook, armed from the environment (issue 14): the sink's options know nothing of it."""
    s = SinkOptions.parse({**BS, "faultInjection": "before_commit:fail"})
    assert not any("fault" in f for f in vars(s))


def test_a_pausing_fault_waits_for_its_release_file_then_lets_the_task_go_on(tmp_path, monkeypatch) -> None:
    import threading
    import time

    from oncelog.spark import faults

    armed = tmp_path / "armed"
    monkeypatch.setenv(faults.ENV, str(armed))
    faults.arm(armed, "after_produce:pause@2", tmp_path)
    done = threading.Event()
    t = threading.Thread(target=lambda: (faults.maybe_fire("after_produce", 2), done.set()))
    t.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "after_produce@2").exists():
        assert time.monotonic() < deadline, "the pausing fault did not record itself"
        time.sleep(0.01)
    assert not done.wait(0.2), "a pausing fault returned before its release"
    (tmp_path / "after_produce@2.release").touch()
    t.join(10)
    assert done.is_set(), "released, the task should go on (no exception)"
