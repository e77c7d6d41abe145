"""Testing Kafka code against a real oncelog broker.

``Broker`` (broker.py) is a context manager: ``with oncelog.testing.Broker() as b:`` gives a
broker on a free loopback port with ``b.bootstrap_servers``. The pytest plugin (plugin.py,
registered through the ``pytest11`` entry point as ``oncelog``) gives the same object as the
fixture ``oncelog_broker``. docs/TESTING-WITH-ONCELOG.md has a worked example.
"""

from oncelog.testing.broker import TEST_DEFAULTS, Broker, BrokerError
from oncelog.testing.cluster import CLUSTER_DEFAULTS, Cluster

__all__ = ["Broker", "BrokerError", "CLUSTER_DEFAULTS", "Cluster", "TEST_DEFAULTS"]
