#!/bin/bash
# side by side: minute landing files, partitioned-range (delay_targets' minute_files mode), the checkout before then this one
MODE="stream:partitioned-range:apply_interval_seconds=30:sizes=derived"
export SPARK_LOCAL_IP=127.0.0.1
for side in before after; do
  if [ $side = before ]; then dir=/tmp/before; else dir=/work/main; fi
  (cd $dir && /work/main/.venv/bin/python -m benchmarks.stream_live --minutes 4 --rate 10 --micro-batch-seconds 60 --run-minutes 4 --deadline-minutes 4 --modes "$MODE" --out /tmp/pr/min-$side.json > /tmp/pr/min-$side.log 2>&1)
  echo "$side rc=$?"
done
