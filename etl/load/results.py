"""What a load reports: one ``BatchResult`` per committed step, summed by ``LoadResult`` into the
run summary the CLI prints and the DAG logs. Pure Python."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from etl.core.delays import Delays, run_delays, visible_delays

OUTCOME_COUNTS = ("matched", "new", "duplicate", "stale")
FLUSH_STEP = -1  # batch_index of the release made by flush() at the end of a run
# batch_seq of a step that released nothing: it is recorded in the ledger (the step is done) but is
# no batch, so it takes no batch_seq and [a, b) then [b, c) number their batches as [a, c) does.
NO_BATCH = 0


@dataclass
class HeldWindows:
    """Every ``ingested_updates`` row of a run's arrival windows ``[first, end)``, as the always-on
    loader's ingest just wrote them, held in memory (a local checkpoint, ``rows``): its next load
    steps decide those windows from memory instead of reading the table back (a read of a table
    changed since is a new Delta snapshot and its file filtering: two Spark jobs and about 1.5 s a
    step on 2 cores, issue 46)."""

    first: int
    end: int
    rows: Any  # a DataFrame of ingested_updates' schema

    def windows(self) -> range:
        return range(self.first, self.end)


@dataclass
class BatchResult:
    run_key: str
    batch_index: int
    batch_seq: int
    updates_in: int
    counts: dict
    keys_allocated: int
    delay_avg_s: float | None  # over the updates but the clock_skew ones (etl.core.delays)
    delay_p99_s: float | None
    duration_s: float  # from the step's start to its write-ahead commit
    recovered: bool = False
    # From the write-ahead commit to the end of both MERGEs: the delays above are measured to the
    # commit (the batch is decided and durable); readers of the tables see it this much later.
    applied_s: float | None = None
    # From the write-ahead commit to the entity table's MERGE commit (None: not applied yet, its
    # MERGEs wait for apply_interval_seconds): the *visible* delay is the logged one plus this.
    visible_s: float | None = None
    clock_skew: int = 0  # updates that arrived after the commit: no delay, left out of the delays
    sequence_conflicts: int = 0  # duplicates at a seen position with other content (not applied)

    @property
    def delays(self) -> Delays:
        return Delays(self.delay_avg_s, self.delay_p99_s, self.updates_in - self.clock_skew, self.clock_skew)

    @property
    def visible_delays(self) -> Delays:
        return visible_delays(self.delays, self.visible_s)


@dataclass
class LoadResult:
    run_key: str
    strategy: str
    batches: list[BatchResult] = field(default_factory=list)
    skipped_batches: int = 0
    recovered_batches: int = 0
    # A fact's load: per referenced dimension, the keys it allocated there as inferred members.
    inferred_members: dict[str, int] = field(default_factory=dict)
    reference_lookups: dict[str, dict] = field(default_factory=dict)  # and what its lookups cost

    @property
    def counts(self) -> dict:
        total = {k: 0 for k in OUTCOME_COUNTS}
        for b in self.batches:
            for k in OUTCOME_COUNTS:
                total[k] += b.counts.get(k, 0)
        return total

    def summary(self) -> dict:
        delays = run_delays(b.delays for b in self.batches)
        visible = run_delays(b.visible_delays for b in self.batches)
        unapplied = [b for b in self.batches if b.batch_seq != NO_BATCH and b.visible_s is None]
        return {
            "run_key": self.run_key,
            "strategy": self.strategy,
            "batches_committed": len(self.batches),
            "batches_already_done": self.skipped_batches,
            "batches_recovered": self.recovered_batches,
            "updates_in": sum(b.updates_in for b in self.batches),
            "outcomes": self.counts,
            "keys_allocated": sum(b.keys_allocated for b in self.batches),
            **({"inferred_members": dict(self.inferred_members), "reference_lookups": dict(self.reference_lookups)}
               if self.inferred_members else {}),
            "delay_avg_s": delays.avg_s,  # logged: arrival to the write-ahead commit
            "delay_p99_s": delays.p99_s,
            # visible: arrival to the entity table's MERGE commit, over the batches this process
            # saw applied (a batch a restart's recovery applied has no time here)
            "visible_delay_avg_s": visible.avg_s,
            "visible_delay_p99_s": visible.p99_s,
            "batches_visible_unknown": len(unapplied),
            "clock_skew": delays.clock_skew,
            "sequence_conflicts": sum(b.sequence_conflicts for b in self.batches),
            "batches": [asdict(b) for b in self.batches],
        }


@dataclass(frozen=True)
class Step:
    """One committed step of a run, as the ledger records it."""

    run_key: str
    batch_index: int
    batch_seq: int
    strategy: str
    started: float  # epoch seconds
    committed: float  # the write-ahead commit (for a step with no batch: its ledger row)
    next_key: int  # the first surrogate key this step could allocate
    updates_in: int = 0
    counts: dict = field(default_factory=lambda: {k: 0 for k in OUTCOME_COUNTS})
    delay_avg_s: float | None = None
    delay_p99_s: float | None = None
    clock_skew: int = 0
    sequence_conflicts: int = 0

    @property
    def keys_allocated(self) -> int:
        return self.counts["new"]

    def result(self) -> BatchResult:
        return BatchResult(self.run_key, self.batch_index, self.batch_seq, self.updates_in, self.counts,
                           self.keys_allocated, self.delay_avg_s, self.delay_p99_s, self.committed - self.started,
                           clock_skew=self.clock_skew, sequence_conflicts=self.sequence_conflicts)
