"""Where a pass of ``etl stream`` on Kafka goes: ``benchmarks.stream_live`` (same arguments) with
the stream's calls timed (the ingest's planning, its query of ``landed_files``, the broker's
offsets, the tally, the appends; the load step's decide, log and apply), each pass's figures
written beside ``--out`` (``<out>.passes.json``, as ``benchmarks.stream_piece.Timer`` keeps them) and the medians over
the passes after the first two and before the last two printed to stderr.

    .venv/bin/python -m benchmarks.kafka_stream_calls --kafka --minutes 3 --rate 10 --keys 20000 \
        --micro-batch-seconds 20 --run-minutes 2 --deadline-minutes 3 --out /tmp/calls.json \
        --modes baseline:kafka,stream:native:piece_seconds=5:micro_batch_seconds=5:stream_grace_seconds=1:apply_interval_seconds=30

A call inside another counts in both; a call in the apply's thread is reported apart (``(beside)``)."""
import atexit
import json
import statistics
import sys

from benchmarks import stream_live
from benchmarks.stream_piece import Timer

CALLS = [
    ("etl.stream", "jobs.ingest_pieces"), ("etl.load.loader", "Loader.load_ready"),
    ("etl.jobs", "scan_sources"), ("etl.jobs", "check_sequence_definition"), ("etl.jobs", "open_tables"),
    ("etl.jobs", "plan_ranges"), ("etl.io.kafka", "recorded_ranges"), ("etl.io.kafka", "Broker.__init__"),
    ("etl.io.kafka", "Broker.topics"), ("etl.io.kafka", "Broker.offsets_at"), ("etl.io.kafka", "Broker._offsets"),
    ("etl.io.kafka", "Broker.__exit__"),
    ("etl.jobs", "check_landed_files"), ("etl.jobs", "check_kafka_ranges"), ("etl.jobs", "_tally"),
    ("etl.jobs", "_check_recorded"), ("etl.jobs", "to_ingested"), ("etl.jobs", "_writes_locked"),
    ("etl.io.delta_tables", "DeltaTables.append"), ("etl.io.delta_tables", "DeltaTables.conform"),
    ("etl.io.delta_tables", "DeltaTables.replace_where"),
    ("etl.stream", "Stream._save"), ("etl.stream", "Stream._heartbeat"),
    ("etl.load.protocol", "CommitProtocol.decide"), ("etl.load.protocol", "CommitProtocol.log"),
    ("etl.load.protocol", "CommitProtocol.apply"), ("etl.load.protocol", "CommitProtocol.finish_apply"),
    ("etl.load.protocol", "CommitProtocol.start_apply"), ("etl.load.loader", "Loader._prepare"),
    ("etl.load.loader", "Loader._plan"), ("etl.load.loader", "check_sequence_definition"),
    # issue 47's phases at full size: the partitioned join's probes and its resident copy's fold,
    # MESHJOIN's fold, each MERGE pair, the table services between batches and at a run's end
    ("etl.strategies.partitioned.join", "PartitionedJoin.submit"), ("etl.strategies.partitioned.join", "PartitionedJoin._probe"),
    ("etl.strategies.partitioned.join", "PartitionedJoin.keys_committed"), ("etl.strategies.meshjoin", "MeshJoin.submit"),
    ("etl.strategies.meshjoin", "MeshJoin.keys_committed"), ("etl.load.protocol", "CommitProtocol._apply_rows"),
    ("etl.load.protocol", "CommitProtocol.table_services"), ("etl.load.loader", "Loader._end_service"),
    # inside the write-ahead commit: its first action (the summary, which computes the decision,
    # the join included) and the ledger row's append; the commit whole, the tail's aggregate, the
    # arrivals' count and the copy's reconciliation
    ("etl.load.protocol", "summarise_outcomes"), ("etl.load.ledger", "Ledger.record"),
    ("etl.load.protocol", "CommitProtocol.commit"), ("etl.load.tail", "LoggedTail.add"),
    ("etl.load.protocol", "key_map_changes"), ("etl.strategies.partitioned.join", "PartitionedJoin._arrivals"),
    ("etl.strategies.partitioned.resident", "ResidentSet.sync"),
]


def report(timer: Timer, out: str) -> None:
    """Medians per call over the passes after the first two and before the last two (all, when
    fewer), to stderr; every pass's figures (per call: seconds, -, -, calls) beside ``out``."""
    steady = timer.pieces[2:-2] or timer.pieces
    medians = {}
    for label in sorted({k for p in steady for k in p}):
        xs = [p.get(label, [0.0])[0] for p in steady]
        medians[label] = (statistics.median(xs), sum(xs) / len(xs))
    print("passes", len(timer.pieces), file=sys.stderr)
    for label, (median, mean) in sorted(medians.items(), key=lambda kv: -kv[1][1]):
        print(f"{label:45s} median {median:.3f}  mean {mean:.3f}", file=sys.stderr)
    with open(out + ".passes.json", "w") as f:
        json.dump({"passes": timer.pieces}, f)


if __name__ == "__main__":
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "docs/results/stream_live.json"
    timer = Timer(None, None)  # the session is stream_live's own, made after the calls are wrapped
    for module, attr in CALLS:
        timer.wrap(module, attr, closes_piece=attr == "Loader.load_ready")
    atexit.register(report, timer, out)
    sys.argv = ["stream_live"] + sys.argv[1:]
    stream_live.main()
