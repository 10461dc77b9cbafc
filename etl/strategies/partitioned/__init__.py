"""``partitioned-range`` / ``partitioned-hash``: the partition-based hybrid join (papers/004 §6.3),
the mechanism of ``etl.core.policy.PartitionPolicy``'s decisions: the join (``join.py``), the
durable wait buffer (``wait_buffer.py``) and the in-memory copy of resident segments
(``resident.py``)."""

from etl.strategies.partitioned.join import PartitionedJoin

__all__ = ["PartitionedJoin"]
