"""Request handlers: one module per Kafka API (``handle(req, broker: BrokerContext, client)``,
named in the one routing table ``broker/routes.py``), plus shared helpers in ``_*.py``. A
handler decodes nothing and encodes nothing (the dispatcher does), raises typed ``KafkaError``s
(translated at the dispatcher's one boundary) and reaches services only through the typed
``BrokerContext`` (``broker/context.py``).

May import: oncelog's pure layers, the root's ``context`` and ``pipelining``, and the parts
below it: configuration, auth, partitions, coordinators, membership, observability. Only the
network part (the dispatcher) imports handlers, and only ApiVersions' answer by name.
"""
