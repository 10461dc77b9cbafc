"""Where a test run's time went: minutes per tier and per module, from the JUnit report pytest
wrote (``--junitxml``; each test carries its tier, set in tests/conftest.py). `.ci/run` prints it
at the end of every CI run, so the suite's cost is measured, not guessed.

    .venv/bin/python scripts/test_times.py var/ci/junit.xml [--top 25]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def slowest(report: Path, n: int) -> list[tuple[float, str]]:
    """The ``n`` slowest tests (set-up included): where the next minute is to be found."""
    cases = [(float(c.get("time") or 0), f"{c.get('classname')}::{c.get('name')}")
             for c in ET.parse(report).getroot().iter("testcase")]
    return sorted(cases, reverse=True)[:n]


def times(report: Path) -> tuple[dict[str, list[float]], dict[str, list[float]], float]:
    """Per tier and per module: [seconds, tests, failures]; and the run's own wall time."""
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    by_tier: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    for case in root.iter("testcase"):
        seconds = float(case.get("time") or 0)
        tier = next((p.get("value") for p in case.iter("property") if p.get("name") == "tier"), "unknown")
        module = (case.get("classname") or "?").split("::")[0]
        module = ".".join(part for part in module.split(".") if not part[:1].isupper())  # drop a test class
        failed = any(child.tag in ("failure", "error") for child in case)
        for bucket in (by_tier[tier], by_module[module]):
            bucket[0] += seconds
            bucket[1] += 1
            bucket[2] += failed
    wall = sum(float(s.get("time") or 0) for s in suites)
    return by_tier, by_module, wall


def render(by_tier, by_module, wall: float, top: int) -> str:
    lines = [f"test run: {wall / 60:.1f} min of pytest ({sum(v[1] for v in by_tier.values())} tests)", "",
             f"{'tier':<10}{'minutes':>9}{'tests':>7}{'failed':>8}"]
    for tier in ("pure", "spark", "e2e", "slow", "unknown"):
        if tier in by_tier:
            s, n, f = by_tier[tier]
            lines.append(f"{tier:<10}{s / 60:>9.1f}{n:>7}{f:>8}")
    lines += ["", f"{'module (slowest first)':<60}{'minutes':>9}{'tests':>7}"]
    for module, (s, n, _) in sorted(by_module.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{module:<60}{s / 60:>9.1f}{n:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=25, help="modules to list (default 25)")
    args = parser.parse_args(argv)
    if not args.report.exists():
        print(f"no JUnit report at {args.report}", file=sys.stderr)
        return 2
    print(render(*times(args.report), args.top))
    print(f"\n{'test (slowest first)':<110}{'seconds':>9}")
    for seconds, name in slowest(args.report, args.top):
        print(f"{name[-110:]:<110}{seconds:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
