"""A run's interval of arrival time (pure Python: the DAGs, the CLI and the jobs share it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

RUN_KEY_FORMAT = "%Y%m%dT%H%M"


def parse_ts(text: str) -> datetime:
    """ISO 8601, UTC when it has no zone."""
    ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def parse_minute(text: str) -> datetime:
    """A whole minute, ISO 8601 (UTC when it has no zone)."""
    ts = parse_ts(text).astimezone(timezone.utc)
    if ts.second or ts.microsecond:
        raise ValueError(f"{text!r} must be a whole minute")
    return ts


@dataclass(frozen=True)
class Interval:
    """A half-open interval ``[start, end)`` of arrival time, aligned to whole minutes."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            ts = getattr(self, name)
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=timezone.utc)
            ts = ts.astimezone(timezone.utc)
            if ts.second or ts.microsecond:
                raise ValueError(f"interval {name} {ts.isoformat()} must be a whole minute (landing files are per minute)")
            object.__setattr__(self, name, ts)
        if self.end <= self.start:
            raise ValueError(f"interval end {self.end.isoformat()} must be after start {self.start.isoformat()}")

    @property
    def run_key(self) -> str:
        return f"{self.start:{RUN_KEY_FORMAT}}-{self.end:{RUN_KEY_FORMAT}}"

    @classmethod
    def parse(cls, start: str, end: str) -> "Interval":
        return cls(parse_ts(start), parse_ts(end))

    def minutes(self):
        m = self.start
        while m < self.end:
            yield m
            m += timedelta(minutes=1)

    def overlaps(self, other: "Interval") -> bool:
        return self.start < other.end and other.start < self.end

    def __contains__(self, ts: datetime) -> bool:
        return self.start <= ts < self.end

    @classmethod
    def from_run_key(cls, run_key: str) -> "Interval":
        a, b = run_key.split("-")
        return cls(datetime.strptime(a, RUN_KEY_FORMAT), datetime.strptime(b, RUN_KEY_FORMAT))


def run_intervals(run_keys) -> dict[str, Interval]:
    """The intervals of these run keys, by key; a key that is not an interval (written by hand,
    say) is left out: it overlaps nothing."""
    out = {}
    for k in set(run_keys):
        try:
            out[k] = Interval.from_run_key(k)
        except ValueError:
            continue
    return out


def overlapping(interval: Interval, run_keys) -> list[str]:
    """The run keys (other than ``interval``'s own) whose intervals share a minute with it."""
    return sorted(k for k, other in run_intervals(run_keys).items() if k != interval.run_key and other.overlaps(interval))
