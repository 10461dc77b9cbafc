"""Where a pass of ``etl stream`` on Kafka goes: ``benchmarks.stream_live`` (same arguments) with
the stream's calls timed (the ingest's planning, its query of ``landed_files``, the broker's
offsets, the tally, the appends; the load step's decide, log and apply), each pass's figures
written beside ``--out`` (``<out>.passes.json``: per call, seconds and calls) and the medians over
the passes after the first two and before the last two printed to stderr.

    .venv/bin/python -m benchmarks.kafka_stream_calls --kafka --minutes 3 --rate 10 --keys 20000 \
        --micro-batch-seconds 20 --run-minutes 2 --deadline-minutes 3 --out /tmp/calls.json \
        --modes baseline:kafka,stream:native:piece_seconds=5:micro_batch_seconds=5:stream_grace_seconds=1:apply_interval_seconds=30

A call inside another counts in both; a call in the apply's thread is reported apart (``(beside)``)."""
import atexit
import functools
import importlib
import json
import statistics
import sys
import threading
import time
from collections import defaultdict

from benchmarks import stream_live

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
]
current: dict[str, list] = defaultdict(lambda: [0.0, 0, 0])
passes: list[dict] = []


def wrap_calls() -> None:
    """Every call of ``CALLS`` timed into ``current``; ``Loader.load_ready`` closes a pass."""
    for module, attr in CALLS:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p)
        setattr(owner, name, _timed(getattr(owner, name), attr))


def _timed(real, label: str):
    @functools.wraps(real)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            here = label if threading.current_thread() is threading.main_thread() else label + " (beside)"
            figures = current[here]
            figures[0] += time.perf_counter() - t0
            figures[2] += 1
            if label == "Loader.load_ready":
                passes.append(dict(current))
                current.clear()
    return timed


def report(out: str) -> None:
    steady = passes[2:-2] or passes
    medians = {}
    for label in sorted({k for p in steady for k in p}):
        xs = [p.get(label, [0.0])[0] for p in steady]
        medians[label] = (statistics.median(xs), sum(xs) / len(xs))
    print("passes", len(passes), file=sys.stderr)
    for label, (median, mean) in sorted(medians.items(), key=lambda kv: -kv[1][1]):
        print(f"{label:45s} median {median:.3f}  mean {mean:.3f}", file=sys.stderr)
    with open(out + ".passes.json", "w") as f:
        json.dump({"passes": passes}, f)


if __name__ == "__main__":
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "docs/results/stream_live.json"
    wrap_calls()
    atexit.register(report, out)
    sys.argv = ["stream_live"] + sys.argv[1:]
    stream_live.main()
