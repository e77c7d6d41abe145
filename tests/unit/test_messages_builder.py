"""protocol/messages.Builder: fields a version lacks are dropped, a field no version has is a
TypeError (a typo), whichever version is asked for first."""

from __future__ import annotations

import pytest

from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import Builder


def test_field_of_a_newer_version_is_dropped_for_an_older_one() -> None:
    # leader_epoch exists from Metadata v7 on: v1 drops it, v12 keeps it
    old = Builder(apis.METADATA, 1).MetadataResponsePartition(
        error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=3, replica_nodes=(1,),
        isr_nodes=(1,), offline_replicas=())
    new = Builder(apis.METADATA, 12).MetadataResponsePartition(
        error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=3, replica_nodes=(1,),
        isr_nodes=(1,), offline_replicas=())
    assert not hasattr(old, "leader_epoch")
    assert new.leader_epoch == 3


@pytest.mark.parametrize("version", [12, 1])
def test_a_field_no_version_has_is_a_typo(version: int) -> None:
    m = Builder(apis.METADATA, version)
    with pytest.raises(TypeError, match="leader_epcoh"):
        m.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epcoh=3,
                                    replica_nodes=(1,), isr_nodes=(1,), offline_replicas=())


@pytest.mark.parametrize("api_key", [apis.METADATA, apis.PRODUCE, apis.FETCH, apis.CREATE_TOPICS])
def test_field_names_read_from_source_match_the_imported_classes(api_key: int) -> None:
    """The typo check reads kio's generated modules instead of importing every version (broker
    start-up, issue 19); what it reads must be what importing gives."""
    from kio.schema.index import api_key_map, schema_name_map

    from oncelog.protocol.messages import EntityType, _declared_fields, field_names

    for response in (False, True):
        entity = EntityType.response if response else EntityType.request
        for version, paths in schema_name_map[api_key_map[api_key]].items():
            read = _declared_fields(paths[entity].partition(":")[0])
            imported = {n: field_names(c) for n, c in apis.message_module_classes(api_key, version, response).items()}
            assert read == imported, (api_key, version, response)
