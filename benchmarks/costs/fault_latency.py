"""Harness costs: how long from a scheduled fault to its observed effect, and from its heal to recovery.

    .venv/bin/python -m benchmarks.costs.fault_latency [--repeats N] [--seed S] [--out-dir benchmarks/results]
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
  its own ``controller.jsonl``; the loop sleeps until the plan's next step (``--compare-poll`` runs the schedule
  again with the fixed 0.1 s poll it had before, and tables both arms' lags), and a heal that restarts the syncer
  blocks it.
- ``res.``: the median period of the observer(s) used (effect / recovery when they differ).

Effect and recovery per kind:

- ``kill``, ``stop``: the target's pid dead (SIGKILL; SIGTERM and a graceful leave) / the syncer's Status lists
  a new incarnation of the learner (the restarted process imported JAX and re-joined). The time until the new
  pid merely exists is in the raw samples (``process_up_ms``).
- ``pause``: state T / state no longer T.
- ``slow`` (fraction 0.5, period 0.1 s, the scenario default): first state T, which comes after the duty
  cycle's first run phase (~50 ms by design) / not T for 0.3 s (three periods: the cycle has stopped). The
  slot's duration is a whole number of periods, so the heal comes at the phase of the cycle it started in: its
  run phase, and recovery reads ~0 (up to the stop phase, 50 ms, when the heal is late).
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
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import (
    RESULTS,
    machine,
    markdown_table,
    median_or_none,
    new_figure,
    save_figure,
    write_results,
)
from benchmarks.costs.fault_latency_observers import (
    PROBE_GAP_S,
    PROBE_OPTIONS,
    PROC_POLL_S,
    STATUS_POLL_S,
    Observer,
)
from benchmarks.costs.fault_latency_plan import (
    FIRST_SLOT_S,
    JITTER_S,
    KINDS,
    LEAD_S,
    LEARNERS,
    NETWORK_KINDS,
    PROBE_DEADLINE_S,
    RESTART_KINDS,
    Slot,
    build_schedule,
)
from benchmarks.costs.fault_latency_reading import (
    FaultTimes,
    StatusSample,
    classify_probe,
    fault_times,
    last_ok,
    ms_cell,
    net_rule,
    onset,
    period_ms,
    probe_baseline,
    proc_intervals,
    recovery,
    scheduling_lags,
    state_at,
    status_obs,
    summarize,
)
from benchmarks.measures import percentile
from chaos.history import ControllerRecord, History

NAME = "fault_latency"


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
        s.trace = [
            (round(1000 * (c.t - t_inj), 1), c.pid, c.cls)
            for c in changes
            if t_inj - 0.1 <= c.t < min(t_end, t_heal + 1.0)
        ][:60]
        ref = state_at(changes, t_inj)
        pid_ref = ref.pid if ref else None
        gone = proc_intervals(
            changes,
            obs.proc_last,
            lambda c: (c.pid == pid_ref and c.cls == "dead") or c.pid != pid_ref,
            lambda c: c.pid != pid_ref and c.cls == "running",
        )
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
            up = proc_intervals(
                changes, obs.proc_last, lambda c: False, lambda c: c.pid != pid_heal and c.cls == "running"
            )
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


def _rejoin(
    status: Sequence[StatusSample], learner: str, before: StatusSample | None, t0: float, t1: float
) -> float | None:
    """When the syncer's Status first lists an incarnation of ``learner`` other than the one in ``before``."""
    inc = before.learners.get(learner) if before else None
    o = status_obs(
        status, lambda x: False, lambda x: x.ok and learner in x.learners and x.learners[learner] != inc
    )
    return recovery(o, t0, t1)


# ---- the run ---------------------------------------------------------------------------------------------------


def scenario_tree(slots: Sequence[Slot], seed: int) -> dict[str, Any]:
    """The chaos scenario: a tiny 2-learner cluster that never reaches its budget, and the slots' faults."""
    end = max((s.end_s for s in slots), default=FIRST_SLOT_S)
    return {
        "name": "fault-latency",
        "seed": seed,
        "description": "benchmarks.costs.fault_latency: one fault at a time, each in its own slot",
        "cluster": {
            "seed": seed,
            "token_budget": 10**12,
            "model": {"size": "tiny"},
            "algorithm": {"mode": "decoupled", "num_learners": len(LEARNERS), "num_fragments": 4, "sync_every": 8},
            # a step delay keeps 2 learners off the 2 cores' back; rare evals keep the syncer light
            "learner": {"step_delay_s": 0.05},
            "syncer": {"checkpoint_every_merges": 10, "eval_every_merges": 1000},
        },
        "schedule": [s.spec() for s in slots],
        # The run never finishes training: stop_when ends it after the last slot; this is only a safety net.
        "timeout_s": round(end + 120.0, 3),
    }


def run(
    slots: Sequence[Slot], seed: int, work: Path, wake_at_plan: bool = True
) -> tuple[Observer, list[ControllerRecord], float]:
    """The chaos run with the observers attached; returns them, the controller's records and the wall time.
    ``wake_at_plan`` False: the controller's loop as it was before it woke at the plan's next step (a fixed poll)."""
    from chaos.backends.local import LocalBackend
    from chaos.controller import RunOptions, run_scenario
    from chaos.scenario import parse_scenario

    scenario = parse_scenario(scenario_tree(slots, seed), "benchmarks.costs.fault_latency")
    obs = Observer(slots)

    def backend(cfg: Any, run_dir: Path, toxi: Any, tag: str) -> Any:
        b = LocalBackend(cfg, run_dir, toxi, tag)
        obs.attach(b)
        return b

    out = work / "run"
    t0 = time.monotonic()
    started: list[float] = []

    def after_last_slot(_status: Any) -> bool:
        # The controller polls only once the fault schedule's clock runs (first merge): the first call marks it.
        started.append(time.monotonic())
        return started[-1] - started[0] > end + 1.0

    end = max((s.end_s for s in slots), default=FIRST_SLOT_S)
    try:
        opts = RunOptions(
            out,
            backend=backend,
            baseline=False,
            progress=None,
            stop_when=after_last_slot,
            wake_at_plan=wake_at_plan,
        )
        run_scenario(scenario, opts)
        if not started or started[-1] - started[0] <= end:
            raise RuntimeError("the chaos run finished training before its schedule ended")  # budget is 10^12
    finally:
        obs.close()  # the controller has already healed, deleted its proxies and stopped every process
    history = History.read(out)
    records, teardown = history.records, history.teardown()
    if teardown and (teardown.proxies_left or teardown.processes_left):
        obs.errors.append(f"teardown left something: {teardown.model_dump()}")
    return obs, records, time.monotonic() - t0


ARMS = {
    "plan": "wakes at the plan's next step (the controller now)",
    "poll": "a fixed 0.1 s poll (the controller before)",
}


def compare_lags(records_of: dict[str, list[ControllerRecord]]) -> tuple[dict[str, Any], str]:
    """Per arm (:data:`ARMS`): every step's scheduling lag (injects and heals, ms) with its median, p99 and worst;
    and their table."""
    out: dict[str, Any] = {}
    rows = []
    for arm, records in records_of.items():
        steady, times = fault_times(records)
        pairs = [scheduling_lags(steady, ft) for ft in times.values()] if steady is not None else []
        lags = [x * 1e3 for pair in pairs for x in pair if x is not None and x == x]  # NaN: a fault at_merge
        med, p99 = percentile(lags, 0.5), percentile(lags, 0.99)
        out[arm] = {
            "lags_ms": [round(x, 3) for x in lags],
            "median_ms": med,
            "p99_ms": p99,
            "worst_ms": max(lags, default=None),
        }
        rows.append([ARMS[arm], len(lags), ms_cell(med), ms_cell(p99), ms_cell(max(lags, default=None))])
    header = ["controller loop", "steps (injects and heals)", "sched lag median", "p99", "worst"]
    return out, markdown_table(header, rows)


def resolution(obs: Observer) -> dict[str, dict[str, float | None]]:
    """Median, p99 and worst period (ms) of each observer."""
    probe = [g for ss in obs.probes.values() for g in period_ms([p.start for p in ss])]
    status = period_ms([s.start for s in obs.status])
    proc = [round(1000 * g, 3) for g in obs.proc_gaps]
    return {
        name: {"median_ms": median_or_none(v), "p99_ms": percentile(v, 0.99), "max_ms": max(v) if v else None}
        for name, v in (("proc", proc), ("status", status), ("probe", probe))
    }


def observers_of(kind: str) -> tuple[str, str]:
    """Which observer gives the effect and which the recovery of ``kind``."""
    if kind in NETWORK_KINDS:
        return "probe", "probe"
    if kind in ("pause", "slow"):
        return "proc", "proc"
    if kind == "corrupt":
        return "status", "status"
    return "proc", "status"


def table_rows(
    samples: Sequence[Sample], kinds: Sequence[str], res: dict[str, dict[str, float | None]]
) -> tuple[list[list[Any]], dict[str, Any]]:
    """The Markdown rows and the per-kind summary (JSON) of the table described in the module docstring."""
    rows, summary = [], {}
    for kind in kinds:
        mine = [s for s in samples if s.kind == kind]
        if not mine:
            continue
        used = [s for s in mine if not s.overlapped]  # an overlapped repeat's observations mix two faults
        eff, rec = summarize([s.effect_ms for s in used]), summarize([s.recovery_ms for s in used])
        lag = summarize([s.sched_lag_ms for s in mine])  # the controller's lag is its own, overlapped or not
        missed = [
            f"{n} {w}"
            for n, w in ((len(used) - eff.n, "e"), (len(used) - rec.n, "r"), (len(mine) - len(used), "o"))
            if n
        ]
        oe, orc = observers_of(kind)
        r = (
            ms_cell(res[oe]["median_ms"])
            if oe == orc
            else f"{ms_cell(res[oe]['median_ms'])} / {ms_cell(res[orc]['median_ms'])}"
        )
        params = ", ".join(f"{k}={v}" for k, v in KINDS[kind].params.items())
        rows.append(
            [
                kind + (f" ({params})" if params else ""),
                KINDS[kind].effect,
                KINDS[kind].recovery,
                len(mine),
                ", ".join(missed) or "0",
                ms_cell(eff.median),
                ms_cell(eff.worst),
                ms_cell(rec.median),
                ms_cell(rec.worst),
                ms_cell(lag.median),
                ms_cell(lag.worst),
                r,
            ]
        )
        summary[kind] = {
            "n": len(mine),
            "overlapped": len(mine) - len(used),
            "effect_ms": asdict(eff),
            "recovery_ms": asdict(rec),
            "sched_lag_ms": asdict(lag),
            "heal_lag_ms": asdict(summarize([s.heal_lag_ms for s in mine])),
            "process_up_ms": asdict(summarize([s.process_up_ms for s in used])),
            "inject_call_ms": asdict(summarize([s.inject_call_ms for s in mine])),
            "effect": KINDS[kind].effect,
            "recovery": KINDS[kind].recovery,
            "observers": {"effect": oe, "recovery": orc},
        }
    return rows, summary


HEADER = [
    "fault",
    "effect",
    "recovery",
    "n",
    "missed",
    "inject→effect median",
    "worst",
    "heal→recovery median",
    "worst",
    "sched lag median",
    "worst",
    "res.",
]


def plot(samples: Sequence[Sample], kinds: Sequence[str], out_dir: Path) -> Path:
    """Per kind, every repeat's three times as dots on a log axis."""
    fig, ax = new_figure(9.0, 0.45 * len(kinds) + 1.6)
    shown = [k for k in kinds if any(s.kind == k for s in samples)]
    floor = 0.05  # ms: a 0 (effect already seen by a call in flight at the invoke) still shows, at the left edge
    for attr, label, dy, marker in (
        ("effect_ms", "inject → effect", -0.2, "o"),
        ("recovery_ms", "heal → recovery", 0.0, "s"),
        ("sched_lag_ms", "scheduling lag", 0.2, "^"),
    ):
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
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.costs.fault_latency", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--repeats", type=int, default=3, help="repeats of each fault kind (default 3)")
    ap.add_argument(
        "--corrupt-repeats",
        type=int,
        default=1,
        help="repeats of corrupt (default 1: two learner restarts and a training upload, ~16 s each)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the order, targets and start jitter (default 0)")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of: " + ", ".join(KINDS))
    ap.add_argument(
        "--compare-poll",
        action="store_true",
        help="run the schedule a second time with the controller's fixed 0.1 s poll (its loop before it woke at the "
        "plan's next step) and compare the scheduling lags",
    )
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or args.repeats < 1 or args.corrupt_repeats < 0:
        ap.error(f"unknown kinds {unknown}" if unknown else "--repeats must be at least 1")
    kinds = [k for k in kinds if k != "corrupt" or args.corrupt_repeats > 0]
    repeats_of = {"corrupt": args.corrupt_repeats}
    slots = build_schedule(kinds, args.repeats, random.Random(args.seed), repeats_of=repeats_of)
    m = machine()
    print(
        f"{len(slots)} faults over {slots[-1].end_s:.0f} s of schedule after steady state (plus start-up and "
        f"teardown); seed {args.seed}; {m['cpus_usable']} cores, load {m['load_avg_at_start']}",
        flush=True,
    )
    before: list[ControllerRecord] = []
    with tempfile.TemporaryDirectory(prefix="fault-latency-") as tmp:
        try:
            obs, records, wall = run(slots, args.seed, Path(tmp) / "plan")
            if args.compare_poll:
                _, before, _ = run(slots, args.seed, Path(tmp) / "poll", wake_at_plan=False)
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
    print(
        f"\nobserver periods (median / p99 ms): proc {ms_cell(res['proc']['median_ms'])} / "
        f"{ms_cell(res['proc']['p99_ms'])}, status {ms_cell(res['status']['median_ms'])} / "
        f"{ms_cell(res['status']['p99_ms'])}, probe {ms_cell(res['probe']['median_ms'])} / "
        f"{ms_cell(res['probe']['p99_ms'])}; run wall time {wall:.0f} s"
    )
    for e in obs.errors:
        print(f"observer problem: {e}", file=sys.stderr)
    config = {
        "seed": args.seed,
        "repeats": args.repeats,
        "repeats_of": repeats_of,
        "kinds": kinds,
        "kind_specs": {k: asdict(KINDS[k]) for k in kinds},
        "schedule": [asdict(s) for s in slots],
        "scenario": scenario_tree(slots, args.seed),
        "observers": {
            "proc_poll_s": PROC_POLL_S,
            "status_poll_s": STATUS_POLL_S,
            "probe_gap_s": PROBE_GAP_S,
            "probe_deadline_s": PROBE_DEADLINE_S,
            "probe_options": PROBE_OPTIONS,
        },
        "lead_s": LEAD_S,
        "jitter_s": JITTER_S,
        "controller_poll_s": 0.1,
        "compare_poll": args.compare_poll,
    }
    results = {
        "summary": summary,
        "resolution": res,
        "wall_s": round(wall, 1),
        "observer_errors": obs.errors,
        "samples": [asdict(s) for s in samples],
    }
    if args.compare_poll:
        results["schedule_lag"], results["schedule_table"] = compare_lags({"plan": records, "poll": before})
        print()
        print(results["schedule_table"])
    path = write_results(NAME, config=config, results=results, table=table, out_dir=args.out_dir)
    png = plot(samples, kinds, args.out_dir)
    print(f"\nwrote {path} and {png}")
    return 0 if not obs.errors else 1


if __name__ == "__main__":
    sys.exit(main())
