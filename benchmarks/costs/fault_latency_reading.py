"""benchmarks.costs.fault_latency, reading observations (pure): onsets and recoveries, process states, probe samples,
the controller's fault times, summaries."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import median_or_none
from chaos.history import ControllerRecord, FaultOp, Phase, PlanRecord
from faults import procfs

# ---- observations and their reading (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Obs:
    """One observation spanning [start, end]: a probe call, or an interval of one process state."""

    start: float
    end: float
    affected: bool  # shows the fault's effect
    healthy: bool  # shows normal behaviour


def onset(obs: Sequence[Obs], t0: float, t1: float, confirm: int = 1) -> float | None:
    """When the effect was first seen in [t0, t1): the start of the first of ``confirm`` affected observations
    in a row, clamped to ``t0`` (an observation in flight at ``t0`` counts from ``t0``); None if never.

    Example:
        >>> o = [Obs(0, 1, False, True), Obs(1, 2, True, False), Obs(2, 3, True, False)]
        >>> onset(o, 0.5, 9), onset(o, 0.5, 9, confirm=3), onset(o, 1.5, 9)
        (1, None, 1.5)
    """
    cand = [o for o in sorted(obs, key=lambda o: o.start) if o.end >= t0 and o.start < t1]
    for k in range(len(cand) - confirm + 1):
        if all(o.affected for o in cand[k : k + confirm]):
            return max(cand[k].start, t0)
    return None


def recovery(obs: Sequence[Obs], t0: float, t1: float, stable_s: float = 0.0) -> float | None:
    """When normal behaviour came back after ``t0``: the start (clamped to ``t0``) of the first healthy
    observation after which everything stays healthy for ``stable_s`` (and is observed that long), before ``t1``.

    Example:
        >>> o = [Obs(0, 1, True, False), Obs(1, 1.05, False, True), Obs(1.05, 1.1, True, False),
        ...      Obs(1.1, 2, False, True)]
        >>> recovery(o, 0.5, 9), recovery(o, 0.5, 9, stable_s=0.5)
        (1, 1.1)
    """
    cand = [o for o in sorted(obs, key=lambda o: o.start) if o.end >= t0 and o.start < t1]
    for k, first in enumerate(cand):
        if not first.healthy:
            continue
        until = first.start + stable_s
        span = [o for o in cand[k:] if o.start < until]
        if all(o.healthy for o in span) and max(o.end for o in cand[k:]) >= until:
            return max(first.start, t0)
    return None


def proc_class(stat: str | None) -> str:
    """``dead``, ``stopped`` or ``running`` from the text of ``/proc/<pid>/stat`` (None: no such pid).

    The state letter follows the last ``)``: the command name in parentheses may itself hold spaces or ``)``.

    Example:
        >>> proc_class("42 (python (x)) T 1 2"), proc_class("42 (py) Z 1"), proc_class(None), proc_class("7 (a) S")
        ('stopped', 'dead', 'dead', 'running')
    """
    if stat is None:
        return "dead"
    state = procfs.state_letter(stat)
    if state in procfs.DEAD:
        return "dead"
    return "stopped" if state in ("T", "t") else "running"


@dataclass(frozen=True)
class ProcState:
    """A change of one unit's process as the proc observer saw it: from ``t`` on, ``pid`` was in ``cls``."""

    t: float
    pid: int | None
    cls: str


def proc_intervals(
    changes: Sequence[ProcState],
    t_last: float,
    affected: Callable[[ProcState], bool],
    healthy: Callable[[ProcState], bool],
) -> list[Obs]:
    """Changes → observations spanning each state until the next change (the last one until ``t_last``).

    Example:
        >>> ch = [ProcState(0.0, 1, "running"), ProcState(2.0, 1, "stopped")]
        >>> [(o.start, o.end, o.affected) for o in proc_intervals(ch, 3.0, lambda s: s.cls == "stopped",
        ...                                                        lambda s: s.cls == "running")]
        [(0.0, 2.0, False), (2.0, 3.0, True)]
    """
    out = []
    for i, c in enumerate(changes):
        end = changes[i + 1].t if i + 1 < len(changes) else max(t_last, c.t)
        out.append(Obs(c.t, end, affected(c), healthy(c)))
    return out


def state_at(changes: Sequence[ProcState], t: float) -> ProcState | None:
    """The unit's state at time ``t`` (the last change at or before it).

    Example:
        >>> state_at([ProcState(0.0, 1, "running"), ProcState(2.0, 5, "running")], 1.0).pid
        1
    """
    before = [c for c in changes if c.t <= t]
    return before[-1] if before else None


@dataclass(frozen=True)
class ProbeSample:
    """One probe call through a learner's proxy: when, how it ended (gRPC code name) and the reply's size."""

    start: float
    end: float
    code: str
    reply_bytes: int = 0

    @property
    def rtt_ms(self) -> float:
        return 1000.0 * (self.end - self.start)


@dataclass(frozen=True)
class NetRule:
    """How to read probe calls for one network fault: ``mode`` deadline | error | slow, and its thresholds."""

    mode: str
    extra_ms: float = 0.0  # "slow": the added round trip that counts as the effect
    confirm: int = 1


def net_rule(kind: str, params: dict[str, Any], base_reply_bytes: float) -> NetRule:
    """The reading rule of a network kind (see the module docstring for why each threshold).

    Example:
        >>> net_rule("latency", {"latency_ms": 100}, 189), net_rule("bandwidth", {"rate_kbps": 1}, 200).extra_ms
        (NetRule(mode='slow', extra_ms=100.0, confirm=2), 100.0)
    """
    if kind == "partition":
        return NetRule("deadline", confirm=2)
    if kind in ("link_down", "reset_peer", "data_limit"):
        return NetRule("error")
    if kind == "latency":  # one-way latency on both streams: the round trip gains 2 × latency; half of that counts
        return NetRule("slow", float(params["latency_ms"]), confirm=2)
    if kind == "bandwidth":  # bytes / (KB/s) = ms; the reply alone, halved: a lower bound of the added time
        return NetRule("slow", 0.5 * base_reply_bytes / float(params["rate_kbps"]), confirm=2)
    raise ValueError(f"{kind!r} is not a network fault kind")


def classify_probe(s: ProbeSample, rule: NetRule, base_rtt_ms: float) -> Obs:
    """One probe call as an observation: affected and healthy under ``rule``.

    Example:
        >>> r = NetRule("slow", 100.0, 2)
        >>> classify_probe(ProbeSample(0, 0.25, "OK"), r, 2.0), classify_probe(ProbeSample(0, 0.5, "UNAVAILABLE"),
        ...                                                                     NetRule("error"), 2.0).affected
        (Obs(start=0, end=0.25, affected=True, healthy=False), True)
    """
    ok = s.code == "OK"
    if rule.mode == "deadline":
        return Obs(s.start, s.end, s.code == "DEADLINE_EXCEEDED", ok)
    if rule.mode == "error":
        return Obs(s.start, s.end, s.code not in ("OK", "DEADLINE_EXCEEDED"), ok)
    slow = s.rtt_ms >= base_rtt_ms + rule.extra_ms
    return Obs(s.start, s.end, ok and slow, ok and not slow)


def probe_baseline(samples: Sequence[ProbeSample], before: float) -> tuple[float, float] | None:
    """Median round trip (ms) and reply size of the successful calls that ended before ``before``; None if none.

    Example:
        >>> probe_baseline([ProbeSample(0, 0.002, "OK", 180), ProbeSample(0.01, 0.014, "OK", 200)], 1.0)
        (3.0, 190.0)
    """
    ok = [s for s in samples if s.code == "OK" and s.end < before]
    if not ok:
        return None
    return statistics.median(s.rtt_ms for s in ok), float(statistics.median(s.reply_bytes for s in ok))


@dataclass(frozen=True)
class StatusSample:
    """One Status call of the status observer on the syncer's own address."""

    start: float
    end: float
    ok: bool
    syncer: str = ""  # the syncer's incarnation
    learners: dict[str, str] = field(default_factory=dict)  # learner id -> incarnation
    non_finite: int = 0


def last_ok(samples: Sequence[StatusSample], before: float) -> StatusSample | None:
    """The last successful Status sample that ended before ``before``.

    Example:
        >>> st = [StatusSample(0, 1, True, "a"), StatusSample(1, 2, False), StatusSample(2, 3, True, "b")]
        >>> last_ok(st, 2.5).syncer
        'a'
    """
    ok = [s for s in samples if s.ok and s.end < before]
    return ok[-1] if ok else None


def status_obs(
    samples: Sequence[StatusSample],
    affected: Callable[[StatusSample], bool],
    healthy: Callable[[StatusSample], bool],
) -> list[Obs]:
    """Status samples as observations (a failed call is neither affected nor healthy unless a predicate says so)."""
    return [Obs(s.start, s.end, affected(s), healthy(s)) for s in samples]


# ---- records of the controller (pure) -----------------------------------------------------------------------


@dataclass
class FaultTimes:
    """One fault's steps from ``controller.jsonl`` (wall-clock times) and its planned start."""

    fault_id: str
    kind: str
    at: float
    duration: float
    inject_invoke: float | None = None
    inject_done: float | None = None
    inject_ok: bool = False
    heal_invoke: float | None = None
    heal_done: float | None = None
    heal_ok: bool = False


def fault_times(records: Sequence[ControllerRecord]) -> tuple[float | None, dict[str, FaultTimes]]:
    """The steady-state time and each planned fault's invoke / ok-or-fail times, from controller records.

    Example:
        >>> from chaos.history import FaultOp, Phase, PlanRecord, PlannedFault
        >>> op = dict(fault_id="a", fault_kind="pause", action="inject", targets=["learner-0"])
        >>> recs = [PlanRecord(ts=99.0, scenario="s", seed=0, faults=[PlannedFault(
        ...             fault_id="a", kind="pause", targets=["learner-0"], at=1.0, at_merge=None, duration=0.5,
        ...             params={})]),
        ...         Phase(ts=100.0, name="steady"),
        ...         FaultOp(ts=101.03, outcome="invoke", **op), FaultOp(ts=101.04, outcome="ok", **op)]
        >>> steady, ft = fault_times(recs); steady, ft["a"].inject_invoke, ft["a"].inject_ok, ft["a"].heal_invoke
        (100.0, 101.03, True, None)
    """
    steady: float | None = None
    out: dict[str, FaultTimes] = {}
    for r in records:
        if isinstance(r, PlanRecord):
            for f in r.faults:
                out[f.fault_id] = FaultTimes(f.fault_id, f.kind, math.nan if f.at is None else f.at, f.duration)
        elif isinstance(r, Phase) and r.name == "steady":
            steady = r.ts
        elif isinstance(r, FaultOp) and r.fault_id in out:
            ft = out[r.fault_id]
            if r.outcome == "invoke":
                setattr(ft, f"{r.action}_invoke", r.ts)
            else:
                setattr(ft, f"{r.action}_done", r.ts)
                setattr(ft, f"{r.action}_ok", r.outcome == "ok")
    return steady, out


def scheduling_lags(steady: float, ft: FaultTimes) -> tuple[float | None, float | None]:
    """Seconds late of the inject (vs steady + ``at``) and of the heal (vs the inject + ``duration``).

    Example:
        >>> scheduling_lags(100.0, FaultTimes("a", "pause", 1.0, 0.5, inject_invoke=101.03, heal_invoke=101.6))
        (0.03, 0.07)
    """
    inj = None if ft.inject_invoke is None else round(ft.inject_invoke - steady - ft.at, 6)
    heal = None
    if ft.inject_invoke is not None and ft.heal_invoke is not None:
        heal = round(ft.heal_invoke - ft.inject_invoke - ft.duration, 6)
    return inj, heal


# ---- summary (pure) ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Median and worst (max) of one measure over the values that were observed."""

    n: int
    median: float | None
    worst: float | None


def summarize(values: Sequence[float | None]) -> Summary:
    """Summary of the observed values (None: not observed, left out).

    Example:
        >>> summarize([3.0, None, 1.0, 2.0])
        Summary(n=3, median=2.0, worst=3.0)
    """
    seen = [v for v in values if v is not None]
    return Summary(len(seen), median_or_none(seen), max(seen) if seen else None)


def ms_cell(v: float | None) -> str:
    """A table cell in milliseconds: one decimal below 10 ms, whole numbers above.

    Example:
        >>> ms_cell(1.234), ms_cell(1234.5), ms_cell(None)
        ('1.2', '1234', '—')
    """
    if v is None:
        return "—"
    return f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}"


def period_ms(starts: Sequence[float], max_gap_s: float = 0.5) -> list[float]:
    """Start-to-start gaps in ms (gaps over ``max_gap_s`` are pauses between windows, not the period).

    Example:
        >>> period_ms([0.0, 0.002, 0.005, 3.0])
        [2.0, 3.0]
    """
    return [round(1000 * (b - a), 3) for a, b in zip(starts, starts[1:]) if 0 <= b - a <= max_gap_s]
