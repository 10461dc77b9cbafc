#!/usr/bin/env bash
# Side by side, one after the other, nothing else running (2026-12-07, about 32 minutes): the
# full-size step before the change (a worktree of 6657aa8 at /tmp/before, with this change's
# benchmarks/measures.py and benchmarks/stream_piece.py copied in, so both sides are timed the same
# way) and after it (the checkout). Each side: 20 M keys, 1,024 segments, the thesis's skew, 1,000
# updates/s for 3 minutes in 10-s files and windows, the MERGEs every 60 s; partitioned-range at
# its derived sizes, with one-window batches (h_mark raised) and with the product's marks.
set -u
OUT="$(cd "$(dirname "$0")" && pwd)"
ARGS="--minutes 3 --rate 1000 --skew thesis --keys 20000000 --piece-seconds 10 --micro-batch-seconds 10 --apply-interval-seconds 60 --strategies partitioned-range:h_mark=1000000,partitioned-range --n-part 1024 --sizes derived --driver-memory 8g"
export SPARK_LOCAL_IP=127.0.0.1
(cd /tmp/before && /work/main/.venv/bin/python -m benchmarks.stream_piece $ARGS --out "$OUT/before.json")
(cd /work/main && .venv/bin/python -m benchmarks.stream_piece $ARGS --out "$OUT/after.json")
