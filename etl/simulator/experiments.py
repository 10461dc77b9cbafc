"""The thesis's experiments (papers/004 §6.4.2, Figures 6.5-6.13) and a recommendation for a
user's own workload, from the simulator.

    etl simulate figures --out docs/results/simulator [--quick]
    etl simulate recommend --rate 800 --relation-mb 500 --memory-mb 64 --b 0.7

Each experiment runs every strategy on the same trace and relation. Results go to one JSON
file (every number behind every plot, with the parameters and the command) and one PNG per
figure.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from etl.core.config import EtlConfig
from etl.core.sizing import wait_buffer_for
from etl.simulator.engine import LIVE_STRATEGIES, STRATEGIES, SimResult, simulate
from etl.simulator.model import MB, SimParams
from etl.simulator.workload import Relation, Trace

RATES = (500, 750, 1000, 1250, 1500, 1750, 2000)
MEMORY_MB = (20, 30, 40, 60, 80)
BIASES = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75)
THESIS = ("partitioned-range", "partitioned-hash", "meshjoin")
LABEL = {
    "partitioned-range": "range-partitioned",
    "partitioned-hash": "hash-partitioned",
    "meshjoin": "MESHJOIN",
    "native": "native (not in the thesis)",
}
STYLE = {"partitioned-range": "o-", "partitioned-hash": "s-", "meshjoin": "^-", "native": "x:"}


def _run_all(p: SimParams, relation: Relation, strategies=STRATEGIES, progress=None) -> dict[str, SimResult]:
    trace = Trace.generate(p)
    out = {}
    for s in strategies:
        out[s] = simulate(s, p, trace, relation)
        if progress:
            r = out[s]
            progress(
                f"{s:18s} rate {p.rate:6.0f}  M {p.memory_budget // MB:3d} MB  b {p.b:.2f}: "
                f"avg delay {r.avg_delay_s:8.2f} s, disk {r.disk_s:7.1f} s, cpu {r.cpu_s:7.1f} s, "
                f"{'sustained' if r.sustained else 'BACKLOG GROWS'} ({r.wall_s:.1f} s)"
            )
    return out


def run_experiments(base: SimParams, quick: bool = False, progress: Callable[[str], None] | None = None) -> dict:
    """Rate sweep (6.5, 6.7-6.11), memory sweep (6.12) and bias sweep (6.13)."""
    rates = RATES[::3] if quick else RATES
    memories = MEMORY_MB[::2] if quick else MEMORY_MB
    biases = BIASES[::2] if quick else BIASES
    relation = Relation.generate(base)
    t0 = time.perf_counter()
    by_rate = {r: _run_all(base.replace(rate=float(r)), relation, progress=progress) for r in rates}
    by_memory = {m: _run_all(base.replace(memory_budget=m * MB), relation, THESIS, progress) for m in memories}
    by_bias = {b: _run_all(base.replace(b=b), relation, THESIS, progress) for b in biases}

    def table(runs: dict) -> dict:
        return {str(x): {s: r.as_dict() for s, r in res.items()} for x, res in runs.items()}

    params = asdict(base)
    return {
        "params": params,
        "sweeps": {"rate": table(by_rate), "memory_mb": table(by_memory), "b": table(by_bias)},
        "wall_seconds": time.perf_counter() - t0,
    }


def _series(sweep: dict, strategy: str, metric: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for x, res in sweep.items():
        if strategy in res:
            xs.append(float(x))
            ys.append(res[strategy][metric])
    return xs, ys


def write_figures(results: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    rate, memory, bias = (results["sweeps"][k] for k in ("rate", "memory_mb", "b"))
    written = []

    def save(fig, name):
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)

    # 6.5: buffered tuples over time, one panel per strategy, one line per rate.
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, s in zip(axes, THESIS):
        for r, res in rate.items():
            pts = res[s]["buffered"]
            ax.plot([p[0] / 60 for p in pts], [p[1] for p in pts], label=f"{float(r):.0f}/s")
        ax.set_title(f"Fig 6.5: buffered tuples, {LABEL[s]}")
        ax.set_xlabel("time (min)")
        ax.set_ylabel("tuples in the input buffer")
        ax.legend(fontsize=7)
    save(fig, "fig_6_5_buffered.png")

    def lines(sweep, metric, title, xlabel, ylabel, name, strategies, log=False):
        fig, ax = plt.subplots(figsize=(6, 4))
        for s in strategies:
            xs, ys = _series(sweep, s, metric)
            if xs:
                ax.plot(xs, ys, STYLE[s], label=LABEL[s])
        if log:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        save(fig, name)

    all_s = tuple(s for s in STRATEGIES if any(s in res for res in rate.values()))
    lines(rate, "avg_delay_s", "Fig 6.7: average production delay vs rate", "arrival rate (tuples/s)", "seconds (log)", "fig_6_7_delay_vs_rate.png", all_s, log=True)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, group, title in ((a, ("meshjoin",), "(a) MESHJOIN"), (b, ("partitioned-range", "partitioned-hash"), "(b) partitioned")):
        for s in group:
            xs, ys = _series(rate, s, "disk_s")
            ax.plot(xs, ys, STYLE[s], label=LABEL[s])
        ax.set_title(f"Fig 6.8{title}: disk time vs rate")
        ax.set_xlabel("arrival rate (tuples/s)")
        ax.set_ylabel("disk seconds")
        ax.legend(fontsize=8)
    save(fig, "fig_6_8_disk_vs_rate.png")
    lines(rate, "processed", "Fig 6.9: processed tuples vs rate", "arrival rate (tuples/s)", "tuples produced", "fig_6_9_processed_vs_rate.png", THESIS)
    lines(rate, "cpu_s", "Fig 6.10: CPU time vs rate", "arrival rate (tuples/s)", "CPU seconds", "fig_6_10_cpu_vs_rate.png", THESIS)
    lines(rate, "system_s", "Fig 6.11: total system time vs rate", "arrival rate (tuples/s)", "disk + CPU seconds", "fig_6_11_system_vs_rate.png", THESIS)
    lines(memory, "avg_delay_s", "Fig 6.12: average production delay vs memory", "memory M (MB)", "seconds (log)", "fig_6_12_delay_vs_memory.png", THESIS, log=True)
    lines(bias, "avg_delay_s", "Fig 6.13: average production delay vs bias b", "b-model bias b", "seconds (log)", "fig_6_13_delay_vs_bias.png", THESIS, log=True)
    return written


def write_results(results: dict, out_dir: Path, command: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "simulator.json"
    path.write_text(json.dumps({"command": command, **results}, indent=1, sort_keys=True, default=float) + "\n")
    return path


# ----------------------------------------------------------------------------- recommendation

N_INVOKE_CHOICES = (500, 1000, 3000, 6000)
SETTINGS_OF = {
    "partitioned-range": ("n_invoke", "memory_budget", "theta", "alpha", "rho", "r_wb", "max_wait_s"),
    "partitioned-hash": ("n_invoke", "memory_budget", "n_part", "alpha", "rho", "r_wb", "max_wait_s"),
    "meshjoin": ("k", "d", "memory_budget"),
    "native": (),
}


def etl_n_invoke(n_invoke: int, simulated_wait_tuples: int, memory_budget: int) -> int:
    """A simulated ``n_invoke`` as the ETL's: the simulator's tuples are Table 6.2's 64 bytes, the
    ETL derives its wait buffer from ``memory_budget`` in its own updates' size (etl/core/sizing.py),
    so the threshold is the same share of that buffer as of the simulated one."""
    return max(1, round(n_invoke * wait_buffer_for(memory_budget, EtlConfig.s_bytes) / simulated_wait_tuples))


def recommend(p: SimParams, progress: Callable[[str], None] | None = None) -> dict:
    """Simulate every strategy (and the partitioned ones at several ``n_invoke``) on the user's
    workload; recommend the lowest average delay among those that keep up with the rate. With
    ``p.live`` (the loader's costs on Spark), only the partitioned joins: the others have no
    model of their costs there."""
    relation = Relation.generate(p)
    trace = Trace.generate(p)
    candidates = []
    for s in STRATEGIES if p.live is None else LIVE_STRATEGIES:
        choices = N_INVOKE_CHOICES if s.startswith("partitioned") else (p.n_invoke,)
        for n_invoke in choices:
            q = p.replace(n_invoke=n_invoke)
            r = simulate(s, q, trace, relation)
            candidates.append((s, q, r))
            if progress:
                progress(f"{s:18s} n_invoke {n_invoke:5d}: avg delay {r.avg_delay_s:9.2f} s, p99 {r.p99_delay_s:9.2f} s, "
                         f"{r.disk_bytes / max(r.arrived, 1) * 1000 / MB:8.2f} MB read per 1000 updates, "
                         f"{'keeps up' if r.sustained else 'falls behind'}")

    def score(c):
        s, q, r = c
        return (not r.sustained, math.inf if math.isnan(r.avg_delay_s) else r.avg_delay_s)

    best_s, best_q, best_r = min(candidates, key=score)
    settings = {"join_strategy": best_s, "memory_budget": best_q.join_memory if best_s.startswith("partitioned") else best_q.memory_budget}
    if best_s.startswith("partitioned"):
        settings.update(n_invoke=etl_n_invoke(best_q.n_invoke, best_q.wait_buffer_tuples, settings["memory_budget"]),
                        alpha=best_q.alpha, rho=best_q.rho, r_wb=best_q.r_wb)
        if best_q.max_wait_s:
            settings["max_wait_s"] = best_q.max_wait_s
        if best_s == "partitioned-range":
            settings["theta"] = best_q.theta // best_q.r_bytes
        else:
            settings["n_part"] = best_q.n_bucket
    elif best_s == "meshjoin":
        settings.update(k=best_q.meshjoin_k, d=best_q.d)
    return {
        "recommended": settings,
        "why": (
            f"{best_s} keeps up with {p.rate:.0f} updates/s at the lowest simulated average delay "
            f"({best_r.avg_delay_s:.2f} s, p99 {best_r.p99_delay_s:.2f} s)"
            if best_r.sustained
            else f"no strategy keeps up with {p.rate:.0f} updates/s in simulation; {best_s} has the lowest delay"
        ),
        "candidates": [
            {"strategy": s, "n_invoke": q.n_invoke, "avg_delay_s": r.avg_delay_s, "p99_delay_s": r.p99_delay_s,
             "keymap_bytes_per_1000_updates": r.disk_bytes / max(r.arrived, 1) * 1000, "sustained": r.sustained}
            for s, q, r in candidates
        ],
    }
