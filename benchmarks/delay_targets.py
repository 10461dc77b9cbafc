"""Issue 46's three targets, measured in one run, one benchmark after the other, and the targets
table they fill (docs/benchmark.md, "Issue 46's targets, in one run").

    .venv/bin/python -m benchmarks.delay_targets                  # about 90 minutes on 2 cores, nothing else running
    .venv/bin/python -m benchmarks.delay_targets --only kafka     # one of kafka, minute_files, full_size
    .venv/bin/python -m benchmarks.delay_targets --table-only     # the table again from the results on disk

The three, each a benchmark of its own in a process of its own (one Spark driver at a time):

- ``kafka``: ``benchmarks.stream_live --kafka``, small size (20,000 keys, 10 updates/s, 3 minutes),
  the hand-written Structured Streaming baseline beside ``etl stream`` reading pieces of the same
  stream on a topic of each mode's: native with 5-s windows of 5-s pieces, and 4-s and 10-s windows
  of 2-s pieces; partitioned-range with the sizes derived from the memory and a 5-s wait bound
  (``max_wait_s``) at 5-s windows of 5-s pieces, with a tenth of key_map as its join memory (the
  thesis's comparisons) and with the product's default (40 MB, all of key_map here). Target: a
  logged delay at most 1.0x the baseline's and at most 10 s on average.
- ``minute_files``: ``benchmarks.stream_live``, minute landing files, 60-s windows, the MERGEs every
  30 s, native and partitioned-range. Target: an average delay at most 50 s.
- ``full_size``: ``benchmarks.stream_piece`` at 20 M keys (1,024 segments, 1,000 updates/s, 10-s
  pieces and windows, the MERGEs every 60 s, the thesis's skew, partitioned-range at the derived
  sizes), with the product's granularity marks (a 10-s window of 10,000 updates is above ``h_mark``:
  four-window batches) and with one-window batches (``h_mark`` raised), the target's 10,000
  updates a batch. Target: a releasing step's delay path at most 4 s, 1 commit and 8 jobs at
  10,000 updates, and the coalesced MERGE pair for 60 s of arrivals at most 20 s.

Each writes its result to ``--out-dir`` (``kafka.json``, ``minute_files.json``, ``full_size.json``,
each with the command that made it); ``targets.json`` and ``targets.md`` there hold the table
(``benchmarks.report.delay_targets``, pure)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.report import delay_targets, delay_targets_markdown

KAFKA_MODES = ",".join([
    "baseline:kafka",
    # A window is read when a piece ends on its boundary: windows a multiple of the pieces
    # (etl.core.stream_plan.granularity_problem; 2-s pieces and 5-s windows read 10 s at a time).
    "stream:native:piece_seconds=5:micro_batch_seconds=5:stream_grace_seconds=1:apply_interval_seconds=30",
    "stream:native:piece_seconds=2:micro_batch_seconds=4:stream_grace_seconds=1:apply_interval_seconds=30",
    "stream:native:piece_seconds=2:micro_batch_seconds=10:stream_grace_seconds=1:apply_interval_seconds=30",
    "stream:partitioned-range:piece_seconds=5:micro_batch_seconds=5:stream_grace_seconds=1:apply_interval_seconds=30:sizes=derived:max_wait_s=5",
    # The product's join memory (memory_budget's default, 40 MB) instead of a tenth of key_map:
    # at 20,000 keys it holds all of key_map, as a user's default run would.
    "stream:partitioned-range:piece_seconds=5:micro_batch_seconds=5:stream_grace_seconds=1:apply_interval_seconds=30:sizes=derived:max_wait_s=5:memory_budget=41943040",
])
MINUTE_MODES = ",".join([
    "stream:native:apply_interval_seconds=30",
    "stream:partitioned-range:apply_interval_seconds=30:sizes=derived",
])
COMMANDS = {
    "kafka": ["benchmarks.stream_live", "--kafka", "--minutes", "3", "--rate", "10", "--keys", "20000",
              "--deadline-minutes", "3", "--modes", KAFKA_MODES],
    "minute_files": ["benchmarks.stream_live", "--minutes", "4", "--rate", "10", "--micro-batch-seconds", "60",
                     "--run-minutes", "4", "--deadline-minutes", "4", "--modes", MINUTE_MODES],
    "full_size": ["benchmarks.stream_piece", "--keys", "20000000", "--n-part", "1024", "--rate", "1000", "--minutes", "3",
                  "--piece-seconds", "10", "--micro-batch-seconds", "10", "--apply-interval-seconds", "60",
                  "--sizes", "derived", "--driver-memory", "8g", "--skew", "thesis",
                  "--strategies", "partitioned-range,partitioned-range:h_mark=1000000"],
}


def run(name: str, out_dir: Path) -> float:
    """One benchmark in a process of its own; its seconds."""
    command = [sys.executable, "-m", *COMMANDS[name], "--out", str(out_dir / f"{name}.json")]
    note(f"{name}: {' '.join(command[1:])}")
    started = time.monotonic()
    subprocess.run(command, check=True)
    seconds = time.monotonic() - started
    note(f"{name}: done in {seconds / 60:.1f} minutes")
    return seconds


def write_table(out_dir: Path, took: dict[str, float] | None = None) -> str:
    results = {name: json.loads((out_dir / f"{name}.json").read_text())
               for name in COMMANDS if (out_dir / f"{name}.json").is_file()}
    rows = delay_targets(results)
    table = delay_targets_markdown(rows)
    # The minutes of the benchmarks not run now stay as the table recorded them.
    written = out_dir / "targets.json"
    minutes = json.loads(written.read_text()).get("minutes", {}) if written.is_file() else {}
    minutes.update({k: round(v / 60, 1) for k, v in (took or {}).items()})
    written.write_text(json.dumps({
        "command": "python -m benchmarks.delay_targets", "date": datetime.now(timezone.utc).date().isoformat(),
        "minutes": minutes, "rows": rows}, indent=2) + "\n")
    (out_dir / "targets.md").write_text(table + "\n")
    return table


def note(message: str) -> None:
    print(f"[delay_targets] {message}", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(COMMANDS), help=f"a comma-separated subset of {', '.join(COMMANDS)}")
    ap.add_argument("--out-dir", default="docs/results/delay_targets")
    ap.add_argument("--table-only", action="store_true", help="no run: the table again from the results in --out-dir")
    args = ap.parse_args()
    chosen = [n for n in args.only.split(",") if n]
    unknown = sorted(set(chosen) - set(COMMANDS))
    if unknown:
        ap.error(f"--only: unknown {', '.join(unknown)} (choose among {', '.join(COMMANDS)})")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    took = {} if args.table_only else {name: run(name, out_dir) for name in chosen}
    print(write_table(out_dir, took))


if __name__ == "__main__":
    main()
