import base64

from etl.devtools.kafka_broker import cluster_id


def test_a_cluster_id_never_starts_with_a_dash_which_the_storage_tool_reads_as_an_option():
    # 0xF8 draws '-' as the first base64 character: one random id in 64 (it failed a benchmark's start).
    draws = iter([bytes([0xF8]) + bytes(15), bytes([0x01]) + bytes(15)])
    cluster = cluster_id(lambda: next(draws))
    assert not cluster.startswith("-")
    assert len(base64.urlsafe_b64decode(cluster + "==")) == 16
