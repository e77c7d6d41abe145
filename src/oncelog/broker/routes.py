"""The routing table: API key -> handler, one module per API (``broker/handlers/``).

This table is what the broker serves and what ApiVersions advertises: ``advertised_versions``
is ``protocol.apis.SUPPORTED_VERSIONS`` restricted to it, and a test holds the two equal, so an
API is advertised exactly when a handler serves it.
"""

from __future__ import annotations

from oncelog.broker.context import Handler
from oncelog.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_user_scram_credentials,
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_transactions,
    describe_user_scram_credentials,
    describe_log_dirs,
    describe_quorum,
    describe_topic_partitions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    list_partition_reassignments,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from oncelog.protocol import apis

__all__ = ["ROUTES", "advertised_versions"]

ROUTES: dict[int, Handler] = {
    m.API_KEY: m.handle
    for m in (
        add_offsets_to_txn, add_partitions_to_txn, alter_configs, api_versions, create_topics, delete_groups, delete_records,
        delete_topics, describe_cluster, describe_configs, describe_groups, end_txn, fetch, find_coordinator,
        heartbeat, incremental_alter_configs, init_producer_id, join_group, leave_group, list_groups, list_offsets, metadata,
        offset_commit, offset_delete, offset_fetch, offset_for_leader_epoch, produce, sync_group, txn_offset_commit,
        write_txn_markers,
        describe_producers, describe_transactions, list_transactions,  # issue 17
        alter_partition_reassignments, create_partitions, describe_log_dirs, describe_quorum,  # issue 16
        describe_topic_partitions, elect_leaders, list_partition_reassignments,
        sasl_handshake, sasl_authenticate, describe_user_scram_credentials, alter_user_scram_credentials,  # issue 18
        create_acls, delete_acls, describe_acls,  # issue 18
    )
}


def advertised_versions() -> dict[int, tuple[int, int]]:
    return {k: v for k, v in apis.SUPPORTED_VERSIONS.items() if k in ROUTES}
