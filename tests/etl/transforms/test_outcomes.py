from datetime import datetime, timedelta

from chispa import assert_df_equality

from etl.transforms.outcomes import resolve

T = datetime(2026, 11, 22, 1, 0)
SCHEMA = (
    "update_id string, source_id string, natural_key string, source_seq long, row_hash string, arrival_ts timestamp, "
    "km_surrogate_key long, km_row_hash string, km_last_source_seq long"
)


def row(uid, key, seq, digest, sec, km=None):
    km = km or (None, None, None)
    return (uid, "crm", key, seq, digest, T + timedelta(seconds=sec), *km)


def test_outcomes_within_one_batch_follow_arrival_order(spark):
    joined = spark.createDataFrame(
        [
            row("u1", "a", 10, "h1", 1),  # new -> key 100
            row("u2", "a", 11, "h2", 2),  # matched
            row("u3", "a", 11, "h2", 3),  # redelivered
            row("u4", "a", 12, "h2", 4),  # unchanged content
            row("u5", "a", 9, "h0", 5),  # stale
            row("u6", "b", 50, "x", 6, km=(7, "x", 40)),  # known key, same content: duplicate
            row("u7", "b", 60, "y", 7, km=(7, "x", 40)),  # matched
            row("u8", "c", 1, "z", 0),  # new -> key 99? no: arrival order puts c first -> key 100
            row("u9", "b", 60, "w", 8, km=(7, "x", 40)),  # u7's position, other content: a conflict
        ],
        SCHEMA,
    )
    got = resolve(joined, next_key=100).select(
        "update_id", "outcome", "reason", "surrogate_key", "applies", "is_last_applied"
    )
    expected = spark.createDataFrame(
        [
            ("u1", "new", None, 101, True, False),
            ("u2", "matched", None, 101, True, True),
            ("u3", "duplicate", "redelivered", 101, False, False),
            ("u4", "duplicate", "unchanged_content", 101, False, False),
            ("u5", "stale", "stale", 101, False, False),
            ("u6", "duplicate", "unchanged_content", 7, False, False),
            ("u7", "matched", None, 7, True, True),
            ("u8", "new", None, 100, True, True),
            ("u9", "duplicate", "sequence_conflict", 7, False, False),
        ],
        got.schema,
    )
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_stale_update_of_a_known_key_is_caught_against_the_stored_sequence(spark):
    joined = spark.createDataFrame([row("u1", "a", 5, "h", 1, km=(3, "old", 8))], SCHEMA)
    out = resolve(joined, next_key=1).select("outcome", "surrogate_key", "stored_source_seq").first()
    assert tuple(out) == ("stale", 3, 8)


def test_an_append_only_fact_keeps_its_first_event_and_an_inferred_member_is_filled(spark):
    """append_only: newer content of a known event id is a duplicate (same_event); an inferred
    member in key_map (sequence -1, empty hash) is matched by the dimension's first real update."""
    schema = SCHEMA + ", op string"
    joined = spark.createDataFrame([
        (*row("u1", "a", 10, "h1", 1), "upsert"),
        (*row("u2", "a", 11, "h2", 2), "upsert"),  # the same event id, other content
        (*row("u3", "b", 12, "h3", 3, km=(5, "h3", 12)), "upsert"),  # re-delivered
    ], schema)
    got = resolve(joined, next_key=1, append_only=True).select("update_id", "outcome", "reason", "applies")
    assert sorted(map(tuple, got.collect())) == [
        ("u1", "new", None, True), ("u2", "duplicate", "same_event", False), ("u3", "duplicate", "redelivered", False)]
    filled = spark.createDataFrame([(*row("u4", "c", 0, "h4", 4, km=(9, "", -1)), "upsert")], schema)
    assert tuple(resolve(filled, next_key=1).select("outcome", "surrogate_key").first()) == ("matched", 9)
