"""Time bounds in the cluster's own units: this run's start-up and round times, not seconds tuned on an idle machine.

A loaded machine stretches everything a chaos run waits for — a restarted
learner's process start, import and compilation, every fragment round — so a
fixed bound in seconds either flips its verdict with the load or is too loose to
catch anything. Instead a bound is a stated multiple of two times the run
measures on itself, under whatever load it ran:

- ``startup_s``: cold start of the whole cluster, from bring-up to the first
  merge (processes or containers, imports, compilation, joins, one round);
- ``round_s``: the median time between consecutive merges of one fragment,
  over the intervals no fault window touches (the pace faults did not set).

    bound = startups × startup_s + rounds × round_s

A scenario may still fix a bound in seconds (``within_s``, ``max_gap_s``); the
report states which it was and how it was derived.

Example:
    >>> p = RunPace(startup_s=4.0, round_s=0.4, intervals=40)
    >>> b = derive_bound(None, p, startups=3, rounds=25)
    >>> round(b.seconds, 6), b.how
    (22.0, '3 × start-up 4.0s + 25 × round 0.40s, measured in this run')
    >>> derive_bound(30.0, p, startups=3, rounds=25).how
    'fixed by the scenario'
    >>> derive_bound(None, RunPace(None, None, 0), startups=3, rounds=25).seconds is None
    True
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from chaos.history import History, Phase
from chaos.records import JsonObject
from trainer import events as ev

MIN_INTERVALS = 3  # fewer fault-free round intervals than this and the round time is not measured


@dataclass(frozen=True)
class RunPace:
    startup_s: float | None  # None: the run has no bring-up/steady phases (it never trained)
    round_s: float | None  # None: fewer than MIN_INTERVALS fault-free intervals
    intervals: int  # how many fault-free intervals the median was taken over

    def to_json(self) -> JsonObject:
        return {"startup_s": _r(self.startup_s), "round_s": _r(self.round_s), "intervals": self.intervals}


@dataclass(frozen=True)
class Bound:
    seconds: float | None  # None: the run's pace could not be measured
    how: str

    def to_json(self) -> JsonObject:
        return {"seconds": _r(self.seconds), "how": self.how}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def run_pace(history: History) -> RunPace:
    """This run's start-up and round times (see the module docstring)."""
    up, steady = history.phase("bring_up"), history.phase("steady")
    startup = steady.ts - up.ts if isinstance(up, Phase) and isinstance(steady, Phase) else None
    windows = [
        (w.start, w.end if w.end is not None else history.end) for w in history.fault_windows() if w.injected
    ]
    by_fragment: dict[int, list[float]] = {}
    for m in history.of(ev.Merge):
        by_fragment.setdefault(m.fragment, []).append(m.ts)
    gaps = [
        b - a
        for ts in by_fragment.values()
        for a, b in zip(ts, ts[1:])
        if not any(a < hi and lo < b for lo, hi in windows)
    ]
    round_s = statistics.median(gaps) if len(gaps) >= MIN_INTERVALS else None
    return RunPace(startup, round_s, len(gaps))


def derive_bound(fixed: float | None, pace: RunPace, *, startups: float, rounds: float) -> Bound:
    """``fixed`` seconds if the scenario gave them, else ``startups × startup_s + rounds × round_s``."""
    if fixed is not None:
        return Bound(fixed, "fixed by the scenario")
    if (startups and pace.startup_s is None) or (rounds and pace.round_s is None):
        return Bound(
            None,
            f"not measurable: start-up {pace.startup_s}, round {pace.round_s} over "
            f"{pace.intervals} fault-free interval(s); give the bound in seconds",
        )
    parts, total = [], 0.0
    if startups:
        total += startups * (pace.startup_s or 0.0)
        parts.append(f"{startups:g} × start-up {pace.startup_s:.1f}s")
    if rounds:
        total += rounds * (pace.round_s or 0.0)
        parts.append(f"{rounds:g} × round {pace.round_s:.2f}s")
    return Bound(total, " + ".join(parts) + ", measured in this run")
