"""The table services' plan (``etl.core.services``): pure, from the paths a Delta table lists."""

from etl.core.services import files_per_segment, segments_to_compact

# As Delta's DataFrame.inputFiles() lists a segment-partitioned table, on a local disk and on S3.
PATHS = [
    "file:/data/warehouse/key_map/segment_id=0/part-00000-1a.c000.snappy.parquet",
    "file:/data/warehouse/key_map/segment_id=0/part-00001-2b.c000.snappy.parquet",
    "file:/data/warehouse/key_map/segment_id=0/part-00000-3c.c000.snappy.parquet",
    "s3a://bucket/warehouse/key_map/segment_id=12/part-00000-4d.c000.snappy.parquet",
    "file:/data/warehouse/key_map/segment_id=7/part-00000-5e.c000.snappy.parquet",
    "file:/data/warehouse/key_map/segment_id=7/part-00003-6f.c000.snappy.parquet",
    "file:/data/warehouse/key_map/part-00000-unpartitioned.parquet",  # an older, unpartitioned file
]


def test_files_are_counted_per_segment_directory():
    assert files_per_segment(PATHS) == {0: 3, 12: 1, 7: 2}
    assert files_per_segment([]) == {}


def test_only_segments_above_the_bound_are_compacted_and_zero_turns_the_service_off():
    files = files_per_segment(PATHS)
    assert segments_to_compact(files, 2) == [0]
    assert segments_to_compact(files, 1) == [0, 7]
    assert segments_to_compact(files, 3) == []
    assert segments_to_compact(files, 0) == []
