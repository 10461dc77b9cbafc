"""``partitioned-range`` / ``partitioned-hash``: the partition-based hybrid join (papers/004 §6.3),
the mechanism of ``etl.core.policy.PartitionPolicy``'s decisions: the join (``join.py``), the
wait buffer (``wait_buffer.py``, in memory, named again by the replay after a restart) and the in-memory copy of resident segments
(``resident.py``)."""

from etl.strategies.partitioned.join import PartitionedJoin

__all__ = ["PartitionedJoin"]
