#!/bin/bash
# side by side: the checkout before (worktree of HEAD) then this one, the partitioned-range Kafka mode of delay_targets
MODE="stream:partitioned-range:piece_seconds=5:micro_batch_seconds=5:stream_grace_seconds=1:apply_interval_seconds=30:sizes=derived:max_wait_s=5"
export SPARK_LOCAL_IP=127.0.0.1
for side in before after; do
  if [ $side = before ]; then dir=/tmp/before; else dir=/work/main; fi
  (cd $dir && /work/main/.venv/bin/python -m benchmarks.stream_live --minutes 3 --rate 10.0 --skew default --keys 20000 --micro-batch-seconds 20 --run-minutes 2 --modes "$MODE" --k 16 --deadline-minutes 3.0 --kafka --driver-memory 2g --out /tmp/pr/side-$side.json > /tmp/pr/side-$side.log 2>&1)
  echo "$side rc=$?"
done
