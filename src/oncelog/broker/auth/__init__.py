"""Authentication and authorization at the entrance: TLS (``tls.py``, our own transport over
``ssl.SSLObject`` in ``tls_transport.py``), SASL PLAIN/SCRAM (``sasl.py``), the credential stores
(``credentials.py``), the gate that holds a connection until it has authenticated (``gate.py``)
and the ACL authorizer over the pure model in ``oncelog.acl`` (``acls.py``).

May import: oncelog's pure layers and broker/configuration. It never reaches partitions,
coordinators or the handlers: a handler asks it, through the context, whether a principal may act.
"""
