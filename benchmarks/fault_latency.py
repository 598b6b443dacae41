"""Harness costs: how long from a scheduled fault to its observed effect, and from its heal to recovery.

    .venv/bin/python -m benchmarks.fault_latency [--repeats N] [--seed S] [--out-dir benchmarks/results]
                                                 [--corrupt-repeats N] [--kinds kill,partition,...]

One real chaos run does all of it: the controller (``chaos.controller.run_scenario``, no baseline) brings up
Toxiproxy, a syncer and 2 tiny learners (each behind its own proxy, budget 10^12 tokens so training never
ends), waits for the first merge, then injects and heals the schedule built here: every fault kind of the
local backend, ``--repeats`` times each (corrupt ``--corrupt-repeats``, default 1: each costs two learner
restarts and a training upload), in an order, with targets and start jitter drawn from ``random.Random(seed)``,
one fault at a time, each in its own slot (``KINDS``: the slot leaves room for the fault's recovery). The
default size takes about 2.5-3 minutes on 2 cores. The run ends by the controller's ``stop_when`` just
after the last slot; its teardown then removes the proxies and stops every process (Ctrl-C and errors take
the same path).

Three independent observers, threads of this process that never look at what an injector returned:

- **proc**: every ~2 ms, the state letter of each unit's current pid in ``/proc/<pid>/stat``: *dead*
  (no such pid, Z or X), *stopped* (T, t) or *running* (anything else). It records changes only.
- **status**: every ~20 ms, the syncer's ``Status`` RPC on its own (unproxied) address: syncer incarnation,
  each learner's incarnation, the ``non_finite`` rejection count.
- **probe**: for each network fault, back-to-back calls *through the target learner's own proxy* (the link
  the fault acts on), ~1 ms apart, from its slot's start (0.3 s before the fault: the baseline round trip)
  until 0.5 s + ``stable_s`` after its heal. The call is the syncer's standard gRPC health check (it takes
  no syncer lock, so its round trip is the link's; ``Status`` takes the state lock that merges and
  checkpoints hold), for bandwidth ``Status`` (a ~190-byte reply, so the rate shows); deadline 0.5 s, for
  partition 0.1 s. After any failed call the probe opens a fresh channel, so its numbers carry no gRPC
  reconnect backoff (a learner's channel adds its own 200 ms–2 s on top of the recovery shown here).

Reading a time off an observer: a probe call (or a proc state interval) that shows the effect counts from
its *start*; one already in flight when the fault was invoked counts from the invoke (so 0 is possible).
The error of a number is about one observer period, the ``res.`` column.

Columns of the table (times in ms; median and worst over the kind's repeats):

- ``fault``: the scenario kind, with the parameters used (``KINDS``).
- ``effect`` / ``recovery``: what the observer waits for (below).
- ``n``: repeats run; ``missed``: repeats whose effect (e) or recovery (r) was not seen within its window
  (effect: inject invoke → heal invoke; recovery: heal invoke → the next fault's inject invoke), and repeats
  overlapped (o) by the next fault (it started before this one's heal returned: the controller was late, e.g.
  blocked by a slow syncer restart). Those are left out of the medians (not of the scheduling lag).
- ``inject→effect``: the controller's inject *invoke* record → the effect first observed. Includes the
  injector's own work (a Toxiproxy API call, a signal, a process start).
- ``heal→recovery``: the heal invoke record → recovery first observed (and held for the kind's ``stable_s``).
- ``sched lag``: the controller's scheduling lag, inject invoke time − (steady + planned ``at``), both from
  its own ``controller.jsonl``; the loop polls every 0.1 s, and a heal that restarts the syncer blocks it.
- ``res.``: the median period of the observer(s) used (effect / recovery when they differ).

Effect and recovery per kind:

- ``kill``, ``stop``: the target's pid dead (SIGKILL; SIGTERM and a graceful leave) / the syncer's Status lists
  a new incarnation of the learner (the restarted process imported JAX and re-joined). The time until the new
  pid merely exists is in the raw samples (``process_up_ms``).
- ``pause``: state T / state no longer T.
- ``slow`` (fraction 0.5, period 0.1 s, the scenario default): first state T, which comes after the duty
  cycle's first run phase (~50 ms by design) / not T for 0.3 s (three periods: the cycle has stopped). The
  period equals the controller's poll, so the heal comes a whole number of polls after the inject, at the
  same phase of the cycle: in its run phase, and recovery reads ~0 (up to the stop phase, 50 ms, when the
  loop drifts).
- ``syncer_crash``: the syncer's pid dead / Status answers from a new syncer incarnation (restored from
  its checkpoint).
- ``corrupt`` (nan): the syncer's ``non_finite`` rejections rise (the corrupt restart joined, trained and
  uploaded) / the healthy restart's incarnation is listed.
- ``partition``: two probe calls in a row get no answer within their 100 ms deadline / a probe call succeeds
  and calls keep succeeding for 0.1 s.
- ``link_down``, ``reset_peer``, ``data_limit`` (500 bytes): a probe call fails with anything but a deadline
  (refused, reset, closed) / calls succeed for 0.1 s (data_limit: 0.25 s, as a fresh connection carries a
  few calls before it is closed). data_limit's effect includes the probe's own time to move 500 bytes.
- ``latency`` (100 ms each way): two calls in a row with round trip ≥ baseline + 100 ms (half the added
  200 ms) / calls back below that for 0.1 s.
- ``bandwidth`` (1 KB/s): two calls in a row with round trip ≥ baseline + ½ × reply bytes / rate (a lower
  bound of the added time: framing and the request pass the toxic too) / back below for 0.1 s.

Writes ``<out-dir>/fault_latency.json`` (config with the seed and the schedule, machine, per-kind summary,
every repeat's raw times and the observers' resolution) and ``<out-dir>/fault_latency.png``.

Limitations: the observers share the controller's process (and GIL; gRPC logs "skipping fork() handlers"
when the controller starts a process while a probe call is in flight: harmless, the child execs at once);
all processes share 2 cores, so the numbers include whatever else the machine runs
(``machine.load_avg_at_start`` in the JSON); 3 repeats give a median and a worst, not a distribution.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.measures import percentile
from benchmarks.common import (
    RESULTS,
    machine,
    markdown_table,
    median_or_none,
    new_figure,
    save_figure,
    write_results,
)
from faults.base import SYNCER
from faults import kinds as fault_kinds

NAME = "fault_latency"
LEARNERS = ("learner-0", "learner-1")

PROC_POLL_S = 0.002
STATUS_POLL_S = 0.02
PROBE_GAP_S = 0.001
PROBE_DEADLINE_S = 0.5
LEAD_S = 0.3  # a network slot's probe starts this long before the fault: the baseline round trip
JITTER_S = 0.1  # start jitter (the controller polls every 0.1 s: spread the starts over its phase)
FIRST_SLOT_S = 1.0  # seconds after steady state before the first slot
# The probe's channel: gRPC's own retries off (a raw observation), no connection sharing with other channels.
PROBE_OPTIONS: list[tuple[str, int]] = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1)]


# ---- what is measured, per kind --------------------------------------------------------------------------

@dataclass(frozen=True)
class KindSpec:
    """One fault kind: its scenario parameters, how long it is held, its slot, and what its observers wait for."""

    kind: str
    params: dict[str, Any]
    hold_s: float  # the fault's scenario ``duration``
    slot_s: float  # time reserved for it (lead + jitter + hold + heal + recovery)
    effect: str
    recovery: str
    stable_s: float = 0.1  # recovery must hold this long
    learner_target: bool = True
    deadline_s: float = PROBE_DEADLINE_S  # of each probe call (network kinds)
    # the probe's RPC: the standard health check (no syncer lock in its path, so its round trip is the link's),
    # or Status where the reply's size matters (bandwidth)
    probe_rpc: str = "health"

    @property
    def network(self) -> bool:
        return self.kind in NETWORK_KINDS


# The kinds this benchmark times: every kind local processes and the real Toxiproxy can inject.
NETWORK_KINDS = frozenset(k for k in fault_kinds.LOCAL_KINDS if fault_kinds.KINDS[k].family == "network")
RESTART_KINDS = frozenset(k for k in fault_kinds.LOCAL_KINDS if fault_kinds.KINDS[k].restarts) - {"syncer_crash"}  # a new learner incarnation

KINDS: dict[str, KindSpec] = {k.kind: k for k in (
    # Restarts import JAX: ~1 s on an idle machine, 3-10 s under load (measured here); a syncer restart also
    # blocks the controller's loop until the new syncer listens, so its slot is the longest.
    KindSpec("kill", {}, 1.0, 8.0, "pid dead", "new incarnation in Status", stable_s=0.0),
    KindSpec("stop", {}, 1.0, 8.0, "pid exited", "new incarnation in Status", stable_s=0.0),
    KindSpec("pause", {}, 0.5, 1.5, "state T", "state not T", stable_s=0.0),
    KindSpec("slow", {"fraction": 0.5, "period_s": 0.1}, 0.6, 1.8, "first state T", "not T for 0.3 s",
             stable_s=0.3),
    KindSpec("syncer_crash", {}, 1.0, 14.0, "syncer pid dead", "new syncer answers Status", stable_s=0.0,
             learner_target=False),
    # the effect waits for the corrupt restart to join, train H steps and upload: hold long enough for that
    KindSpec("corrupt", {"mode": "nan"}, 10.0, 16.0, "non_finite rejections rise", "healthy incarnation listed",
             stable_s=0.0),
    # a short deadline, so several calls fit in the hold (a black hole answers nothing: no need to wait longer)
    KindSpec("partition", {"direction": "both"}, 0.5, 1.8, "2 probe calls get no answer in 100 ms",
             "probe OK for 0.1 s", deadline_s=0.1),
    KindSpec("link_down", {}, 0.5, 1.8, "probe call fails", "probe OK for 0.1 s"),
    KindSpec("bandwidth", {"rate_kbps": 1}, 0.8, 2.0, "2 probe RTTs ≥ base + ½·bytes/rate", "RTT back for 0.1 s",
             probe_rpc="status"),
    KindSpec("latency", {"latency_ms": 100}, 0.8, 2.0, "2 probe RTTs ≥ base + 100 ms", "RTT back for 0.1 s"),
    KindSpec("reset_peer", {"timeout_ms": 0}, 0.5, 1.8, "probe call fails (reset)", "probe OK for 0.1 s"),
    KindSpec("data_limit", {"bytes": 500}, 0.5, 1.8, "probe call fails (closed)", "probe OK for 0.25 s",
             stable_s=0.25),
)}


# ---- the schedule ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One repeat of one kind: its fault id, target, planned start (``at``, seconds after steady) and slot bounds."""

    index: int
    fault_id: str
    kind: str
    target: str
    start_s: float
    at: float
    duration: float
    end_s: float

    def spec(self) -> dict[str, Any]:
        """The scenario schedule entry for this slot."""
        return {"fault": self.kind, "id": self.fault_id, "targets": [self.target], "at": self.at,
                "duration": self.duration, **KINDS[self.kind].params}


def build_schedule(kinds: Sequence[str], repeats: int, rng: random.Random,
                   learners: Sequence[str] = LEARNERS, first_s: float = FIRST_SLOT_S,
                   repeats_of: dict[str, int] | None = None) -> list[Slot]:
    """Every kind ``repeats`` times (``repeats_of`` overrides per kind), shuffled by ``rng``, back to back;
    targets and start jitter from ``rng``.

    Example:
        >>> s = build_schedule(["pause"], 2, random.Random(0))
        >>> [(x.kind, x.start_s, x.end_s) for x in s]
        [('pause', 1.0, 2.5), ('pause', 2.5, 4.0)]
    """
    items = [k for k in kinds for _ in range((repeats_of or {}).get(k, repeats))]
    rng.shuffle(items)
    slots, t = [], first_s
    for i, kind in enumerate(items):
        spec = KINDS[kind]
        target = rng.choice(list(learners)) if spec.learner_target else SYNCER
        at = round(t + LEAD_S + rng.uniform(0.0, JITTER_S), 3)
        slots.append(Slot(i, f"s{i:02d}-{kind}", kind, target, round(t, 3), at, spec.hold_s, round(t + spec.slot_s, 3)))
        t += spec.slot_s
    return slots


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
        if all(o.affected for o in cand[k:k + confirm]):
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
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state in ("Z", "X", "x"):
        return "dead"
    return "stopped" if state in ("T", "t") else "running"


@dataclass(frozen=True)
class ProcState:
    """A change of one unit's process as the proc observer saw it: from ``t`` on, ``pid`` was in ``cls``."""

    t: float
    pid: int | None
    cls: str


def proc_intervals(changes: Sequence[ProcState], t_last: float,
                   affected: Callable[[ProcState], bool], healthy: Callable[[ProcState], bool]) -> list[Obs]:
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


def status_obs(samples: Sequence[StatusSample], affected: Callable[[StatusSample], bool],
               healthy: Callable[[StatusSample], bool]) -> list[Obs]:
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


def fault_times(records: Sequence[dict[str, Any]]) -> tuple[float | None, dict[str, FaultTimes]]:
    """The steady-state time and each planned fault's invoke / ok-or-fail times, from controller records.

    Example:
        >>> recs = [{"kind": "plan", "faults": [{"fault_id": "a", "kind": "pause", "at": 1.0, "duration": 0.5}]},
        ...         {"kind": "phase", "name": "steady", "ts": 100.0},
        ...         {"kind": "fault", "fault_id": "a", "action": "inject", "outcome": "invoke", "ts": 101.03},
        ...         {"kind": "fault", "fault_id": "a", "action": "inject", "outcome": "ok", "ts": 101.04}]
        >>> steady, ft = fault_times(recs); steady, ft["a"].inject_invoke, ft["a"].inject_ok, ft["a"].heal_invoke
        (100.0, 101.03, True, None)
    """
    steady: float | None = None
    out: dict[str, FaultTimes] = {}
    for r in records:
        if r.get("kind") == "plan":
            for f in r["faults"]:
                out[f["fault_id"]] = FaultTimes(f["fault_id"], f["kind"], float(f["at"]), float(f["duration"]))
        elif r.get("kind") == "phase" and r.get("name") == "steady":
            steady = float(r["ts"])
        elif r.get("kind") == "fault" and r.get("fault_id") in out:
            ft, ts = out[r["fault_id"]], float(r["ts"])
            if r["outcome"] == "invoke":
                setattr(ft, f"{r['action']}_invoke", ts)
            else:
                setattr(ft, f"{r['action']}_done", ts)
                setattr(ft, f"{r['action']}_ok", r["outcome"] == "ok")
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


# ---- the observers (threads; real processes and sockets) -----------------------------------------------------

class Observer:
    """The three observers of the module docstring, attached to the run's LocalBackend when it is created."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self.backend: Any = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.changes: dict[str, list[ProcState]] = {}
        self.proc_gaps: list[float] = []
        self.proc_last = 0.0
        self.status: list[StatusSample] = []
        self.probes: dict[str, list[ProbeSample]] = {}  # fault id -> its window's calls
        self.steady: float | None = None
        self.heal_invoked: dict[str, float] = {}  # fault id -> heal invoke time, from controller.jsonl
        self._records_at = 0  # bytes of controller.jsonl read so far
        self.errors: list[str] = []

    def attach(self, backend: Any) -> None:
        """Start watching ``backend`` (called from the backend factory, before bring-up)."""
        self.backend = backend
        units = [SYNCER, *backend.learners()]
        self.changes = {u: [] for u in units}
        for name, fn in (("proc", self._proc_loop), ("status", self._status_loop), ("probe", self._probe_loop)):
            th = threading.Thread(target=self._guard, args=(name, fn), name=f"observer-{name}", daemon=True)
            self.threads.append(th)
            th.start()

    def close(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(PROBE_DEADLINE_S + 2.0)

    def _guard(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - reported in the results, never kills the run
            self.errors.append(f"{name}: {type(err).__name__}: {err}")

    # proc: /proc/<pid>/stat of each unit's current process, changes only
    def _proc_loop(self) -> None:
        procs = self.backend.procs.procs  # name -> Popen; a restart replaces the entry
        last: dict[str, tuple[int | None, str]] = {}
        prev = None
        while not self.stop.is_set():
            t = time.time()
            for unit in self.changes:
                p = procs.get(unit)
                pid = p.pid if p is not None else None
                key = (pid, proc_class(_read_stat(pid)) if pid is not None else "dead")
                if last.get(unit) != key:
                    last[unit] = key
                    self.changes[unit].append(ProcState(t, *key))
            if prev is not None:
                self.proc_gaps.append(t - prev)
            prev = self.proc_last = t
            self.stop.wait(PROC_POLL_S)

    # status: the syncer's Status on its own address
    def _status_loop(self) -> None:
        from trainer.proto import diloco_pb2 as pb

        b = self.backend
        address, metadata = f"127.0.0.1:{b.port}", (("authorization", f"Bearer {b.procs.token}"),)
        prober = _Prober(address, "status", metadata)
        try:
            while not self.stop.is_set():
                t0 = time.time()
                try:
                    r = prober.stub.Status(pb.StatusRequest(), timeout=0.3, metadata=metadata)
                    s = StatusSample(t0, time.time(), True, r.syncer_incarnation,
                                     {lr.learner_id: lr.incarnation for lr in r.learners},
                                     int(r.rejections.get("non_finite", 0)))
                except Exception:  # noqa: BLE001 - grpc.RpcError: the syncer is down or starting
                    s = StatusSample(t0, time.time(), False)
                    prober.reset()  # a fresh channel: no reconnect backoff in the numbers
                self.status.append(s)
                self.stop.wait(STATUS_POLL_S)
        finally:
            prober.close()

    def _read_records(self) -> None:
        """New lines of controller.jsonl: the steady time and heal invokes (when to stop watching, not what)."""
        path = Path(self.backend.run_dir) / "controller.jsonl"
        if not path.exists():
            return
        with open(path, "rb") as f:
            f.seek(self._records_at)
            data = f.read()
        done = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self._records_at += done
        for line in data[:done].splitlines():
            r = json.loads(line)
            if r.get("kind") == "phase" and r.get("name") == "steady":
                self.steady = float(r["ts"])
            elif r.get("kind") == "fault" and r.get("action") == "heal" and r.get("outcome") == "invoke":
                self.heal_invoked.setdefault(r["fault_id"], float(r["ts"]))

    # probe: from each network slot's start until its heal + the recovery it needs, Status through the proxy
    def _probe_loop(self) -> None:
        while self.steady is None and not self.stop.is_set():  # schedule times count from the controller's steady
            self._read_records()
            self.stop.wait(0.05)
        metadata = (("authorization", f"Bearer {self.backend.procs.token}"),)
        for slot in self.slots:
            spec = KINDS[slot.kind]
            if not spec.network or self.stop.is_set():
                continue
            assert self.steady is not None
            start = self.steady + slot.start_s
            # Until the heal (as late as the controller makes it) plus time to see recovery; a cap if never healed.
            tail, cap = spec.stable_s + 0.5, self.steady + slot.end_s + 30.0
            self.stop.wait(max(0.0, start - time.time()))
            address = f"127.0.0.1:{self.backend.proxy_ports[slot.target]}"
            samples = self.probes.setdefault(slot.fault_id, [])
            prober = _Prober(address, spec.probe_rpc, metadata)
            next_read = 0.0
            try:
                while not self.stop.is_set():
                    now = time.time()
                    if now >= next_read:
                        self._read_records()
                        next_read = now + 0.05
                    healed = self.heal_invoked.get(slot.fault_id)
                    if now >= cap or (healed is not None and now >= healed + tail):
                        break
                    t0 = time.time()
                    try:
                        size = prober.call(spec.deadline_s)
                        samples.append(ProbeSample(t0, time.time(), "OK", size))
                    except Exception as err:  # noqa: BLE001 - grpc.RpcError; its code is the observation
                        code = err.code().name if hasattr(err, "code") else type(err).__name__
                        samples.append(ProbeSample(t0, time.time(), code))
                        prober.reset()
                    time.sleep(PROBE_GAP_S)
            finally:
                prober.close()


class _Prober:
    """One gRPC channel to ``address`` and the call a probe makes on it (``rpc``: "health" or "status")."""

    def __init__(self, address: str, rpc: str, metadata: tuple[tuple[str, str], ...]) -> None:
        self.address, self.rpc, self.metadata = address, rpc, metadata
        self.reset()

    def reset(self) -> None:
        """A fresh channel (after a failure: gRPC's reconnect backoff would otherwise be in the numbers)."""
        import grpc
        from grpc_health.v1 import health_pb2_grpc

        from trainer.proto import diloco_pb2_grpc as pbg

        if getattr(self, "channel", None) is not None:
            self.channel.close()
        self.channel = grpc.insecure_channel(self.address, options=PROBE_OPTIONS)
        self.stub = pbg.SyncerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def call(self, deadline_s: float) -> int:
        """One call; the size of its reply. Raises grpc.RpcError."""
        from grpc_health.v1 import health_pb2

        from trainer.proto import diloco_pb2 as pb

        if self.rpc == "health":
            return self.health.Check(health_pb2.HealthCheckRequest(), timeout=deadline_s).ByteSize()
        return self.stub.Status(pb.StatusRequest(), timeout=deadline_s, metadata=self.metadata).ByteSize()

    def close(self) -> None:
        self.channel.close()


def _read_stat(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None


# ---- turning observations into one repeat's numbers -----------------------------------------------------------

@dataclass
class Sample:
    """One repeat of one kind: every time measured, in ms (None: not observed)."""

    fault_id: str
    kind: str
    target: str
    at_s: float
    sched_lag_ms: float | None = None
    heal_lag_ms: float | None = None
    inject_call_ms: float | None = None  # the injector's own invoke → ok (not the observed effect)
    heal_call_ms: float | None = None
    effect_ms: float | None = None
    recovery_ms: float | None = None
    process_up_ms: float | None = None  # restarts: heal invoke → the new pid running
    probe_calls: int = 0
    baseline_rtt_ms: float | None = None
    overlapped: bool = False  # the next fault started before this one was healed: left out of the summary
    trace: list[tuple[float, int | None, str]] = field(default_factory=list)  # proc: (ms after invoke, pid, state)
    note: str = ""


def _ms(t: float | None, ref: float | None) -> float | None:
    return None if t is None or ref is None else round(1000.0 * (t - ref), 3)


def measure(slot: Slot, ft: FaultTimes, steady: float, obs: Observer, window_end: float) -> Sample:
    """One slot's numbers from the controller's records and the observers' data; recovery must come before
    ``window_end`` (the next fault's inject invoke)."""
    spec = KINDS[slot.kind]
    s = Sample(slot.fault_id, slot.kind, slot.target, slot.at)
    lag, heal_lag = scheduling_lags(steady, ft)
    s.sched_lag_ms = None if lag is None else round(1000 * lag, 3)
    s.heal_lag_ms = None if heal_lag is None else round(1000 * heal_lag, 3)
    s.inject_call_ms, s.heal_call_ms = _ms(ft.inject_done, ft.inject_invoke), _ms(ft.heal_done, ft.heal_invoke)
    if ft.inject_invoke is None or not ft.inject_ok:
        s.note = "inject not run or failed"
        return s
    t_end = window_end
    t_inj, t_heal = ft.inject_invoke, ft.heal_invoke if ft.heal_invoke is not None else t_end
    effect_t: float | None = None
    recovery_t: float | None = None
    if spec.network:
        samples = obs.probes.get(slot.fault_id, [])
        s.probe_calls = len(samples)
        base = probe_baseline(samples, t_inj)
        if base is None:
            s.note = "no successful probe call before the inject: no baseline"
            return s
        s.baseline_rtt_ms = round(base[0], 3)
        rule = net_rule(slot.kind, spec.params, base[1])
        o = [classify_probe(p, rule, base[0]) for p in samples]
        effect_t = onset(o, t_inj, t_heal, rule.confirm)
        recovery_t = recovery(o, t_heal, t_end, spec.stable_s)
    else:
        changes = obs.changes.get(slot.target, [])
        s.trace = [(round(1000 * (c.t - t_inj), 1), c.pid, c.cls) for c in changes
                   if t_inj - 0.1 <= c.t < min(t_end, t_heal + 1.0)][:60]
        ref = state_at(changes, t_inj)
        pid_ref = ref.pid if ref else None
        gone = proc_intervals(changes, obs.proc_last, lambda c: (c.pid == pid_ref and c.cls == "dead")
                              or c.pid != pid_ref, lambda c: c.pid != pid_ref and c.cls == "running")
        if slot.kind in ("pause", "slow"):
            o = proc_intervals(changes, obs.proc_last, lambda c: c.cls == "stopped", lambda c: c.cls == "running")
            effect_t = onset(o, t_inj, t_heal)
            recovery_t = recovery(o, t_heal, t_end, spec.stable_s)
        elif slot.kind == "syncer_crash":
            effect_t = onset(gone, t_inj, t_heal)
            before = last_ok(obs.status, t_inj)
            inc = before.syncer if before else None
            o = status_obs(obs.status, lambda x: False, lambda x: x.ok and x.syncer != inc)
            recovery_t = recovery(o, t_heal, t_end)
        elif slot.kind in ("kill", "stop"):
            effect_t = onset(gone, t_inj, t_heal)
            before = last_ok(obs.status, t_inj)
            recovery_t = _rejoin(obs.status, slot.target, before, t_heal, t_end)
        elif slot.kind == "corrupt":
            before = last_ok(obs.status, t_inj)
            n0 = before.non_finite if before else 0
            o = status_obs(obs.status, lambda x: x.ok and x.non_finite > n0, lambda x: False)
            effect_t = onset(o, t_inj, t_heal)
            recovery_t = _rejoin(obs.status, slot.target, last_ok(obs.status, t_heal), t_heal, t_end)
        if slot.kind in RESTART_KINDS | {"syncer_crash"}:
            at_heal = state_at(changes, t_heal)
            pid_heal = at_heal.pid if at_heal else None
            up = proc_intervals(changes, obs.proc_last, lambda c: False,
                                lambda c: c.pid != pid_heal and c.cls == "running")
            s.process_up_ms = _ms(recovery(up, t_heal, t_end), t_heal)
    s.effect_ms = _ms(effect_t, t_inj)
    s.recovery_ms = _ms(recovery_t, t_heal) if ft.heal_invoke is not None else None
    if ft.heal_invoke is None:
        s.note = "never healed within the run"
    return s


def measure_all(slots: Sequence[Slot], times: dict[str, FaultTimes], steady: float, obs: Observer) -> list[Sample]:
    """Every slot measured, each recovery window ending at the next inject; overlapping faults flagged."""
    invokes = sorted(t.inject_invoke for t in times.values() if t.inject_invoke is not None)
    out = []
    for slot in slots:
        ft = times[slot.fault_id]
        later = [t for t in invokes if ft.inject_invoke is not None and t > ft.inject_invoke]
        window_end = later[0] if later else max(obs.proc_last, time.time())
        s = measure(slot, ft, steady, obs, window_end)
        healed = ft.heal_done if ft.heal_done is not None else ft.heal_invoke
        if later and (healed is None or later[0] < healed):
            s.overlapped = True
            s.note = (s.note + "; " if s.note else "") + "the next fault started before this one was healed"
        out.append(s)
    return out


def _rejoin(status: Sequence[StatusSample], learner: str, before: StatusSample | None, t0: float,
            t1: float) -> float | None:
    """When the syncer's Status first lists an incarnation of ``learner`` other than the one in ``before``."""
    inc = before.learners.get(learner) if before else None
    o = status_obs(status, lambda x: False, lambda x: x.ok and learner in x.learners and x.learners[learner] != inc)
    return recovery(o, t0, t1)


# ---- the run ---------------------------------------------------------------------------------------------------

def scenario_tree(slots: Sequence[Slot], seed: int) -> dict[str, Any]:
    """The chaos scenario: a tiny 2-learner cluster that never reaches its budget, and the slots' faults."""
    end = max((s.end_s for s in slots), default=FIRST_SLOT_S)
    return {
        "name": "fault-latency", "seed": seed,
        "description": "benchmarks.fault_latency: one fault at a time, each in its own slot",
        "cluster": {"seed": seed, "token_budget": 10**12, "model": {"size": "tiny"},
                    "algorithm": {"mode": "decoupled", "num_learners": len(LEARNERS), "num_fragments": 4,
                                  "sync_every": 8},
                    # a step delay keeps 2 learners off the 2 cores' back; rare evals keep the syncer light
                    "learner": {"step_delay_s": 0.05},
                    "syncer": {"checkpoint_every_merges": 10, "eval_every_merges": 1000}},
        "schedule": [s.spec() for s in slots],
        # The run never finishes training: stop_when ends it after the last slot; this is only a safety net.
        "timeout_s": round(end + 120.0, 3),
    }


def run(slots: Sequence[Slot], seed: int, work: Path) -> tuple[Observer, list[dict[str, Any]], float]:
    """The chaos run with the observers attached; returns them, the controller's records and the wall time."""
    from chaos.backends.local import LocalBackend
    from chaos.controller import RunOptions, run_scenario
    from chaos.scenario import parse_scenario

    scenario = parse_scenario(scenario_tree(slots, seed), "benchmarks.fault_latency")
    obs = Observer(slots)

    def backend(cfg: Any, run_dir: Path, toxi: Any, tag: str) -> Any:
        b = LocalBackend(cfg, run_dir, toxi, tag)
        obs.attach(b)
        return b

    out = work / "run"
    t0 = time.monotonic()
    started: list[float] = []

    def after_last_slot(_status: Any) -> bool:
        # The controller polls only once the schedule clock runs (first merge): the first call marks it.
        started.append(time.monotonic())
        return started[-1] - started[0] > end + 1.0

    end = max((s.end_s for s in slots), default=FIRST_SLOT_S)
    try:
        run_scenario(scenario, RunOptions(out, backend=backend, baseline=False, progress=None,
                                          stop_when=after_last_slot))
        if not started or started[-1] - started[0] <= end:
            raise RuntimeError("the chaos run finished training before its schedule ended")  # budget is 10^12
    finally:
        obs.close()  # the controller has already healed, deleted its proxies and stopped every process
    records = [json.loads(line) for line in (out / "controller.jsonl").read_text().splitlines() if line.strip()]
    teardown = [r for r in records if r.get("kind") == "phase" and r.get("name") == "teardown"]
    if teardown and (teardown[-1]["detail"].get("proxies_left") or teardown[-1]["detail"].get("processes_left")):
        obs.errors.append(f"teardown left something: {teardown[-1]['detail']}")
    return obs, records, time.monotonic() - t0


def resolution(obs: Observer) -> dict[str, dict[str, float | None]]:
    """Median, p99 and worst period (ms) of each observer."""
    probe = [g for ss in obs.probes.values() for g in period_ms([p.start for p in ss])]
    status = period_ms([s.start for s in obs.status])
    proc = [round(1000 * g, 3) for g in obs.proc_gaps]
    return {name: {"median_ms": median_or_none(v), "p99_ms": percentile(v, 0.99), "max_ms": max(v) if v else None}
            for name, v in (("proc", proc), ("status", status), ("probe", probe))}


def observers_of(kind: str) -> tuple[str, str]:
    """Which observer gives the effect and which the recovery of ``kind``."""
    if kind in NETWORK_KINDS:
        return "probe", "probe"
    if kind in ("pause", "slow"):
        return "proc", "proc"
    if kind == "corrupt":
        return "status", "status"
    return "proc", "status"


def table_rows(samples: Sequence[Sample], kinds: Sequence[str],
               res: dict[str, dict[str, float | None]]) -> tuple[list[list[Any]], dict[str, Any]]:
    """The Markdown rows and the per-kind summary (JSON) of the table described in the module docstring."""
    rows, summary = [], {}
    for kind in kinds:
        mine = [s for s in samples if s.kind == kind]
        if not mine:
            continue
        used = [s for s in mine if not s.overlapped]  # an overlapped repeat's observations mix two faults
        eff, rec = summarize([s.effect_ms for s in used]), summarize([s.recovery_ms for s in used])
        lag = summarize([s.sched_lag_ms for s in mine])  # the controller's lag is its own, overlapped or not
        missed = [f"{n} {w}" for n, w in ((len(used) - eff.n, "e"), (len(used) - rec.n, "r"),
                                          (len(mine) - len(used), "o")) if n]
        oe, orc = observers_of(kind)
        r = ms_cell(res[oe]["median_ms"]) if oe == orc else \
            f"{ms_cell(res[oe]['median_ms'])} / {ms_cell(res[orc]['median_ms'])}"
        params = ", ".join(f"{k}={v}" for k, v in KINDS[kind].params.items())
        rows.append([kind + (f" ({params})" if params else ""), KINDS[kind].effect, KINDS[kind].recovery, len(mine),
                     ", ".join(missed) or "0", ms_cell(eff.median), ms_cell(eff.worst), ms_cell(rec.median),
                     ms_cell(rec.worst), ms_cell(lag.median), ms_cell(lag.worst), r])
        summary[kind] = {"n": len(mine), "overlapped": len(mine) - len(used), "effect_ms": asdict(eff),
                         "recovery_ms": asdict(rec),
                         "sched_lag_ms": asdict(lag), "heal_lag_ms": asdict(summarize([s.heal_lag_ms for s in mine])),
                         "process_up_ms": asdict(summarize([s.process_up_ms for s in used])),
                         "inject_call_ms": asdict(summarize([s.inject_call_ms for s in mine])),
                         "effect": KINDS[kind].effect, "recovery": KINDS[kind].recovery,
                         "observers": {"effect": oe, "recovery": orc}}
    return rows, summary


HEADER = ["fault", "effect", "recovery", "n", "missed", "inject→effect median", "worst", "heal→recovery median",
          "worst", "sched lag median", "worst", "res."]


def plot(samples: Sequence[Sample], kinds: Sequence[str], out_dir: Path) -> Path:
    """Per kind, every repeat's three times as dots on a log axis."""
    fig, ax = new_figure(9.0, 0.45 * len(kinds) + 1.6)
    shown = [k for k in kinds if any(s.kind == k for s in samples)]
    floor = 0.05  # ms: a 0 (effect already seen by a call in flight at the invoke) still shows, at the left edge
    for attr, label, dy, marker in (("effect_ms", "inject → effect", -0.2, "o"),
                                    ("recovery_ms", "heal → recovery", 0.0, "s"),
                                    ("sched_lag_ms", "scheduling lag", 0.2, "^")):
        xs, ys = [], []
        for y, kind in enumerate(shown):
            for s in samples:
                v = getattr(s, attr)
                if s.kind == kind and v is not None:
                    xs.append(max(v, floor))
                    ys.append(y + dy)
        ax.scatter(xs, ys, s=18, marker=marker, label=label, alpha=0.75)
    ax.set_xscale("log")
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels(shown)
    ax.invert_yaxis()
    ax.set_xlabel(f"ms (log; a 0 is drawn at {floor} ms)")
    ax.set_title("fault latency: every repeat (local backend, real Toxiproxy)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return save_figure(fig, NAME, out_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fault_latency", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="repeats of each fault kind (default 3)")
    ap.add_argument("--corrupt-repeats", type=int, default=1,
                    help="repeats of corrupt (default 1: two learner restarts and a training upload, ~16 s each)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the order, targets and start jitter (default 0)")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of: " + ", ".join(KINDS))
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or args.repeats < 1 or args.corrupt_repeats < 0:
        ap.error(f"unknown kinds {unknown}" if unknown else "--repeats must be at least 1")
    kinds = [k for k in kinds if k != "corrupt" or args.corrupt_repeats > 0]
    repeats_of = {"corrupt": args.corrupt_repeats}
    slots = build_schedule(kinds, args.repeats, random.Random(args.seed), repeats_of=repeats_of)
    m = machine()
    print(f"{len(slots)} faults over {slots[-1].end_s:.0f} s of schedule after steady state (plus start-up and "
          f"teardown); seed {args.seed}; {m['cpus_usable']} cores, load {m['load_avg_at_start']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fault-latency-") as tmp:
        try:
            obs, records, wall = run(slots, args.seed, Path(tmp))
        except KeyboardInterrupt:
            print("interrupted; the controller healed every fault and stopped every process", file=sys.stderr)
            return 130
        except Exception as err:  # noqa: BLE001 - chaos.errors.Interrupted too: cleanup has already run
            print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
            return 130 if type(err).__name__ == "Interrupted" else 2
    steady, times = fault_times(records)
    if steady is None:
        print("error: the run never reached steady state", file=sys.stderr)
        return 2
    samples = measure_all(slots, times, steady, obs)
    res = resolution(obs)
    rows, summary = table_rows(samples, kinds, res)
    table = markdown_table(HEADER, rows)
    print()
    print(table)
    print(f"\nobserver periods (median / p99 ms): proc {ms_cell(res['proc']['median_ms'])} / "
          f"{ms_cell(res['proc']['p99_ms'])}, status {ms_cell(res['status']['median_ms'])} / "
          f"{ms_cell(res['status']['p99_ms'])}, probe {ms_cell(res['probe']['median_ms'])} / "
          f"{ms_cell(res['probe']['p99_ms'])}; run wall time {wall:.0f} s")
    for e in obs.errors:
        print(f"observer problem: {e}", file=sys.stderr)
    config = {"seed": args.seed, "repeats": args.repeats, "repeats_of": repeats_of, "kinds": kinds,
              "kind_specs": {k: asdict(KINDS[k]) for k in kinds}, "schedule": [asdict(s) for s in slots],
              "scenario": scenario_tree(slots, args.seed),
              "observers": {"proc_poll_s": PROC_POLL_S, "status_poll_s": STATUS_POLL_S, "probe_gap_s": PROBE_GAP_S,
                            "probe_deadline_s": PROBE_DEADLINE_S, "probe_options": PROBE_OPTIONS},
              "lead_s": LEAD_S, "jitter_s": JITTER_S, "controller_poll_s": 0.1}
    results = {"summary": summary, "resolution": res, "wall_s": round(wall, 1), "observer_errors": obs.errors,
               "samples": [asdict(s) for s in samples]}
    path = write_results(NAME, config=config, results=results, table=table, out_dir=args.out_dir)
    png = plot(samples, kinds, args.out_dir)
    print(f"\nwrote {path} and {png}")
    return 0 if not obs.errors else 1


if __name__ == "__main__":
    sys.exit(main())
