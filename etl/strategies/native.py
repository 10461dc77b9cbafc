"""``native``: what a Spark user would write first, a stream-static join against all of ``key_map``.

Correct and simple; every micro-batch scans the whole current ``key_map``, so its cost grows
with ``|R|``. It is the baseline the other strategies are measured against.
"""

from __future__ import annotations

from etl.io.tables import table_bytes
from etl.strategies.base import JoinStats, JoinStrategy


class NativeJoin(JoinStrategy):
    name = "native"

    def __init__(self, spark, cfg, layout) -> None:
        super().__init__(spark, cfg, layout)
        self._stats = JoinStats()

    def submit(self, batch, batch_index: int) -> list:
        joined = batch.join(self.lookup_columns(self.key_map()), ["source_id", "natural_key"], "left")
        self._stats = JoinStats(keymap_bytes_read=table_bytes(self.spark, self.cfg, "key_map"))
        return [joined]

    def stats(self) -> JoinStats:
        return self._stats
