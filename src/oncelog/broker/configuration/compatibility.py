"""docs/COMPATIBILITY.md, generated: every Kafka API (keys 0..92 as Kafka 4.x numbers them) with
the versions Kafka's own schemas define (kio is generated from them), the versions oncelog
advertises (``routes.advertised_versions``: one table for embedded and cluster mode),
and one line on what oncelog does or why the API is not served.

``python -m oncelog.broker.configuration.compatibility > docs/COMPATIBILITY.md`` rewrites the file; a unit test
holds the file equal to ``render()``, so the document cannot drift from the routing tables.
"""

from __future__ import annotations

from kio.schema.index import api_key_map, schema_name_map

from oncelog.broker.routes import advertised_versions

__all__ = ["NOTES", "render"]

#: Kafka 4.0 removed these ZooKeeper-era inter-broker APIs (KIP-500); kio has no schema for them.
_REMOVED = {4: "leader_and_isr", 5: "stop_replica", 6: "update_metadata", 7: "controlled_shutdown"}
#: Kafka serves these and answers DELEGATION_TOKEN_AUTH_DISABLED without delegation.token.secret.key
_NO_TOKENS = ("not served: delegation tokens (KIP-48) are not implemented (no token store, no SCRAM tokenauth "
              "logins); clients log in as SASL/PLAIN or SCRAM users (docs/SECURITY.md)")
_KRAFT_INTERNAL = "not served: KRaft controller/inter-broker API; oncelog has no Raft quorum (metadata is local or in PostgreSQL)"
_SHARE = "not served: the share coordinator's inter-broker APIs (KIP-932): the share-group state is the broker's own"
_STREAMS = "not served: the streams rebalance protocol (KIP-1071) is not implemented"

NOTES: dict[int, str] = {
    0: "advertised from v0 as Kafka 4 does (KAFKA-18659), served from v3: v0-v2 close the connection as in Kafka 4 (KIP-896); magic-2 record batches appended to the partition log; idempotence and transactions (acks 0/1/all); v12: transactions version 2, the leader adds the partition (KIP-890 part 2); v13+ topics by id (UNKNOWN_TOPIC_ID)",
    1: "whole batches from the log by sendfile(2); long poll; read_committed; v13+ topics by id (UNKNOWN_TOPIC_ID); no fetch sessions (session id 0)",
    2: "earliest/latest/by time; -3 MAX_TIMESTAMP finds the record inside its batch; -4 = log start, -5/-6 = -1 (no tiered storage)",
    3: "brokers, controller (lowest live id), topics with ids; auto-creation; authorized operations when asked (from the ACLs; all without an authorizer)",
    4: "removed in Kafka 4.0 (ZooKeeper-era inter-broker API)",
    5: "removed in Kafka 4.0 (ZooKeeper-era inter-broker API)",
    6: "removed in Kafka 4.0 (ZooKeeper-era inter-broker API)",
    7: "removed in Kafka 4.0 (ZooKeeper-era inter-broker API)",
    8: "group offsets, written to __consumer_offsets; v9+ GROUP_ID_NOT_FOUND for a group that does not exist; v10+ topics by id (UNKNOWN_TOPIC_ID)",
    9: "committed offsets; v8 several groups per request; v9 member id/epoch (ignored: classic groups only); v10+ topics by id (UNKNOWN_TOPIC_ID)",
    10: "group and transaction coordinators (cluster mode: the leader of the key's internal partition); v6 share keys (type 2): INVALID_REQUEST",
    11: "classic group protocol (JoinGroup/SyncGroup), static membership; v8 reason not kept; v9 skip_assignment never set",
    12: "classic group protocol",
    13: "classic group protocol, batch leave (v3+); v5 reasons not kept",
    14: "classic group protocol",
    15: "state, protocol, members; authorized operations when asked (all); v6+ GROUP_ID_NOT_FOUND with a message for a group that does not exist",
    16: "every group with state; v4 state filter, v5 type filter (every group is 'classic')",
    17: "served (issue 18): v0 (then bare tokens) and v1 (KIP-152) on SASL listeners, and to re-authenticate (KIP-368); ILLEGAL_SASL_STATE elsewhere",
    18: "this table; a too-new request gets a v0 answer (KIP-511); v3+: finalized feature transaction.version=2",
    19: "partitions, configs (see COMPATIBILITY-configs.md), validate_only; replication factor 1 (cluster mode: up to the live brokers); "
        "the internal topics' names (`__consumer_offsets`, `__transaction_state`, `__share_group_state`, `__cluster_metadata`) are INVALID_REQUEST",
    20: "by name or topic id; cluster mode: deleted in the store (rows and batches, one transaction), leaders close its partitions",
    21: "moves the log start offset",
    22: "producer ids and epochs, transactional ids (KIP-360 epoch bump); v5 (TRANSACTION_ABORTABLE allowed, not sent); v6 KIP-939 two-phase commit (enable_2pc, keep_prepared_txn: docs/TRANSACTIONS.md): served, not advertised (unstable in Kafka 4.2)",
    23: "leader epochs of the log (KIP-320 truncation detection)",
    24: "adds partitions to a transaction; v4+ from brokers: verify_only (KIP-890 part 1) or the add of a TV2 produce (part 2)",
    25: "adds the group's offsets partition to a transaction",
    26: "commit or abort; markers written to every partition of the transaction; v5: epoch bumped at every end, new id and epoch answered (KIP-890 part 2)",
    27: "transaction markers: inter-broker in cluster mode, and an admin's abort (`oncelog transactions abort`)",
    28: "transactional offsets, pending until the marker; unknown topic/partition: UNKNOWN_TOPIC_OR_PARTITION as Kafka; v5: the offsets partition joins the transaction implicitly (KIP-890 part 2)",
    29: "ACL bindings by filter (issue 18, docs/ACLS.md); SECURITY_DISABLED while no authorizer is configured",
    30: "durable (data dir file; cluster store), effective on live connections at once (docs/ACLS.md)",
    31: "removes what each filter matches, durably (docs/ACLS.md)",
    32: "topic, broker and group configs (see COMPATIBILITY-configs.md)",
    33: "topic, broker and group configs: see COMPATIBILITY-configs.md",
    34: "one log directory per broker: a move to it is NONE (nothing moves), another path LOG_DIR_NOT_FOUND, a partition not here REPLICA_NOT_AVAILABLE; CLUSTER ALTER",
    35: "the data directory with each partition's size and offset lag 0 (cluster mode: the partitions led here, sizes from the store)",
    36: "served (issue 18): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; re-authentication (KIP-368) with connections.max.reauth.ms",
    37: "grows a live topic (embedded: topics.json + new logs; cluster: one store transaction + rebalance); internal topics refused",
    38: _NO_TOKENS,
    39: _NO_TOKENS,
    40: _NO_TOKENS,
    41: _NO_TOKENS,
    42: 'deletes empty groups (a share group with its state and configs)',
    43: "preferred/unclean: ELECTION_NOT_NEEDED per partition (embedded); cluster mode runs a rebalance and answers per partition",
    44: "topic, broker and group configs: see COMPATIBILITY-configs.md",
    45: "one replica per partition: a move to its current replica succeeds, any other target INVALID_REPLICA_ASSIGNMENT",
    46: "no reassignment is ever in progress: empty answer",
    47: "deletes a group's committed offsets",
    48: "not served: no client quotas (no throttling)",
    49: "not served: no client quotas (no throttling)",
    50: "served (issue 18): credentials in the data dir, or in cluster mode in the store",
    51: "served (issue 18): iterations 4096..16384, kept durably (data dir, or the cluster store)",
    52: _KRAFT_INTERNAL,
    53: _KRAFT_INTERNAL,
    54: _KRAFT_INTERNAL,
    55: "a single-voter quorum: the controller id is leader and only voter, other live brokers observers",
    56: _KRAFT_INTERNAL,
    57: "not served: no feature flags to change (finalized features are not versioned here)",
    58: _KRAFT_INTERNAL,
    59: _KRAFT_INTERNAL,
    60: "brokers, cluster id, controller; authorized operations when asked (all); v2 never lists fenced brokers",
    61: "each producer a partition remembers (KIP-664; `oncelog transactions producers`, docs/TRANSACTIONS.md)",
    62: _KRAFT_INTERNAL,
    63: _KRAFT_INTERNAL,
    64: "not served: brokers leave by deregistering in the store (cluster mode) or stopping",
    65: "a transaction at its coordinator (KIP-664; `oncelog transactions describe`)",
    66: "the transactions a broker coordinates, with state, producer-id, duration and id-pattern filters (KIP-664)",
    67: _KRAFT_INTERNAL,
    68: "consumer rebalance protocol (KIP-848, embedded): server-side uniform/range assignors, member epochs, revocation before assignment, regex subscription; static members (epoch -2); membership in memory (not yet durable: members rejoin after a restart or coordinator failover)",
    69: "consumer groups (KIP-848): state, epochs, assignor, members with epochs, subscriptions, current and target assignments; GROUP_ID_NOT_FOUND for a classic or unknown group",
    70: _KRAFT_INTERNAL,
    71: "not served: no client telemetry (KIP-714); clients carry on without it",
    72: "not served: no client telemetry (KIP-714)",
    73: _KRAFT_INTERNAL,
    74: "KIP-1142: v0 client-metrics resources (none); v1 topics, live brokers (BROKER and BROKER_LOGGER), groups with configs; an unlisted type UNSUPPORTED_VERSION as Kafka",
    75: "topics and partitions paged by response_partition_limit with a cursor; eligible leader replicas empty",
    76: "share groups (KIP-932, issue 30), embedded and cluster mode (at the group's coordinator): Kafka's simple assignor (partitions spread over "
        "the members, shared only when members outnumber them, the records of a shared partition divided at acquisition; assigned once "
        "initialized: a new group's members get them at their second heartbeat); member epochs, session timeout "
        "`group.share.session.timeout.ms`; `group.share.max.groups`, `group.share.max.size`; DESCRIBE on every subscribed topic",
    77: "share groups as the broker has them: state, epochs, members and assignments (cluster mode: at the "
        "group's coordinator)",
    78: "records acquired per member with acquisition locks (`group.share.record.lock.duration.ms`) and delivery "
        "counts (`group.share.delivery.count.limit`); share sessions; acknowledgements durable in "
        "`__share_group_state` before the answer; `share.isolation.level=read_committed` never acquires aborted or "
        "open transactions' records; v2: lock renewal, a record granted at most `share.delivery.count.limit` locks; READ checked on "
        "every partition of the session; sessions only for members (cluster mode: confirmed by the group's coordinator), ended with "
        "their connection or after a session timeout unused; cluster mode: "
        "at each partition's leader, the state in the store fenced by its leader epoch",
    79: "ACCEPT / RELEASE / REJECT / GAP (v2: RENEW) per record range, all or nothing per partition, durable before "
        "the answer",
    80: _KRAFT_INTERNAL,
    81: _KRAFT_INTERNAL,
    82: _KRAFT_INTERNAL,
    83: _SHARE,
    84: _SHARE,
    85: _SHARE,
    86: _SHARE,
    87: _SHARE,
    88: _STREAMS,
    89: _STREAMS,
    90: "a share group's start offset and (v1) lag per partition (cluster mode: every partition, from the store; lag -1 for a partition another broker leads)",
    91: "a share group's start offsets set while it has no members (NON_EMPTY_GROUP otherwise), durable; at the group's coordinator (cluster mode: written in the store, the partitions' leaders follow)",
    92: "a share group forgets its state on whole topics while it has no members (NON_EMPTY_GROUP otherwise); at the group's coordinator (cluster mode: in the store)",
}

LAST_KEY = 92


def _range(r: tuple[int, int] | None) -> str:
    return "—" if r is None else f"{r[0]}–{r[1]}" if r[0] != r[1] else f"{r[0]}"


def _kafka_range(key: int) -> tuple[str, tuple[int, int] | None]:
    name = api_key_map.get(key)
    if name is None:
        return _REMOVED.get(key, f"api-{key}"), None
    versions = schema_name_map[name]
    return name, (min(versions), max(versions))


def render() -> str:
    """The whole of docs/COMPATIBILITY.md."""
    embedded = advertised_versions()
    # one routing table (issue 27): cluster mode serves every API embedded does
    cluster = dict(embedded)
    lines = [
        "# Kafka API compatibility",
        "",
        "Every API of the Kafka protocol as Kafka 4.x numbers them, with the versions oncelog advertises",
        "in ApiVersions embedded and in cluster mode. \"Kafka schemas\" is the range of Kafka's own JSON",
        "schemas as the `kio` library is generated from them (Kafka 4.0 removed keys 4–7 and some old",
        "versions, KIP-896).",
        "",
        "**One release's table: Kafka 4.2's.** For every API it serves, oncelog advertises exactly what",
        "a Kafka 4.2 broker advertises (a unit test holds the table equal to the one kafka-python 3.0.12",
        "records for Kafka 4.2), so clients that infer the broker's release from ApiVersions",
        "(kafka-python) take oncelog for Kafka 4.2. Like Kafka 4.2 it advertises Produce from v0 but",
        "serves v3+ (KAFKA-18659), and serves InitProducerId v6 without advertising it (unstable in 4.2).",
        "",
        "**What is not served is refused as Kafka refuses it.** A request for an API oncelog does not",
        "advertise, or for a version outside what it serves (Produce v0–v2 included), closes the",
        "connection without an answer, which is what Kafka 4's network layer does",
        "(`Processor.parseRequestHeader` throws InvalidRequest / UnsupportedVersion and the channel is",
        "closed); the broker logs one line naming the API and version. A librdkafka client with",
        "`api.version.request=false` and `broker.version.fallback` below 0.11 sends Produce v1/v2 and",
        "is disconnected by Kafka 4 and by oncelog alike. Only ApiVersions itself is answered at any",
        "version (KIP-511). Config support is in [COMPATIBILITY-configs.md](COMPATIBILITY-configs.md).",
        "",
        "**The clients' own test suites run in `make test`** (`tests/suites/`): kafka-python 3.0.12's",
        "integration suite from its sdist (55 tests; its SSL tests start their own Kafka and its SASL",
        "tests skip on an external broker, so both files are left out), and a handful of librdkafka's",
        "own tests (0001, 0002, 0005, 0007, 0008, 0012, 0017, 0030 and 0081's config sub-tests: topic,",
        "broker and group configs) built from the librdkafka 2.15.1 sources that npm's",
        "@confluentinc/kafka-javascript 1.10.1 carries; `make test-long` runs 0081 whole (every admin",
        "API, about three minutes). The sources are fetched from the registries and built once into",
        "`build/client-suites/` (`python tests/client_suites.py`; the build takes minutes on two cores).",
        "",
        "Generated by `python -m oncelog.broker.configuration.compatibility > docs/COMPATIBILITY.md` from",
        "`protocol/apis.py` (SUPPORTED_VERSIONS) and the routing table; `tests/unit/test_compatibility_doc.py`",
        "fails when this file and the table differ.",
        "",
        "| key | API | Kafka schemas | oncelog | cluster mode | what oncelog does |",
        "|----:|-----|:-------------:|:-------:|:------------:|-------------------|",
    ]
    for key in range(LAST_KEY + 1):
        name, kafka = _kafka_range(key)
        lines.append(f"| {key} | {name} | {_range(kafka)} | {_range(embedded.get(key))} | "
                     f"{_range(cluster.get(key))} | {NOTES[key]} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
