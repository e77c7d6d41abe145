"""The ApiVersions answer is one Kafka release's: Kafka 4.2's, for every API oncelog serves.

The reference is the table kafka-python 3.0.12 (a pinned test dependency) keeps of what a real
Kafka 4.2 broker answers to ApiVersions (``BROKER_API_VERSIONS[(4, 2)]``); kafka-python infers a
broker's release from these ranges (``infer_broker_version_from_api_versions``), so an answer
mixing releases makes it take oncelog for another Kafka (before: DescribeLogDirs v5 made it 4.3
while the rest was 4.2's; InitProducerId v6 and Produce's minimum 3 were not 4.2's either).
"""

from __future__ import annotations

from oncelog.broker.routes import advertised_versions
from oncelog.protocol import apis


def test_every_served_api_is_advertised_as_kafka_4_2_advertises_it() -> None:
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    kafka = BROKER_API_VERSIONS[apis.KAFKA_RELEASE]
    ours = advertised_versions()
    assert apis.KAFKA_RELEASE == (4, 2)
    assert set(ours) <= set(kafka), f"served here, not by Kafka 4.2: {sorted(set(ours) - set(kafka))}"
    differs = {apis.api_name(k): (v, kafka[k]) for k, v in ours.items() if kafka[k] != v}
    assert differs == {}, f"(oncelog, Kafka 4.2): {differs}"


def test_kafka_python_infers_kafka_4_2_from_the_answer() -> None:
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    assert infer_broker_version_from_api_versions(advertised_versions()) == (4, 2)


def test_what_is_advertised_but_not_served_is_kafkas_own_departure() -> None:
    """Produce v0-v2 (KAFKA-18659) are advertised and refused; InitProducerId v6 is served and not
    advertised (unstable in Kafka 4.2). Everything else is advertised exactly as served."""
    ours = advertised_versions()
    served = apis.SUPPORTED_VERSIONS
    differs = {k for k in served if ours[k] != served[k]}
    assert differs == {apis.PRODUCE, apis.INIT_PRODUCER_ID}
    assert ours[apis.PRODUCE] == (0, served[apis.PRODUCE][1]) and served[apis.PRODUCE][0] == 3
    assert ours[apis.INIT_PRODUCER_ID] == (0, 5) and served[apis.INIT_PRODUCER_ID] == (0, 6)
