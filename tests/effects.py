"""What each built-in scenario's fault must visibly do to a run, read from its history.

One home for the effect checks: the real-process runs of every built-in (tests/chaos/test_builtin_scenarios.py,
nightly) and their deterministic-mode runs (tests/property/test_scenarios_deterministic.py, per change) share them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Protocol

from chaos.checkers.base import Verdict
from chaos.fault_plan import plan
from chaos.history import History
from chaos.run_report import RunReport
from chaos.scenario import builtin_scenarios, load_scenario
from trainer import events as ev


class Outcome(Protocol):
    """What an effect check reads of a run: a chaos.controller.RunResult, or the slice of one a report rebuilds."""

    @property
    def verdicts(self) -> list[Verdict]: ...

    @property
    def report(self) -> RunReport: ...


def _window(h: History, fault_id: str) -> tuple[float, float]:
    w = next(w for w in h.fault_windows() if w.fault_id == fault_id)
    assert w.injected and w.end is not None, f"{fault_id} was not injected and healed: {w}"
    return w.start, w.end


def _uploads(h: History, learner: str, a: float, b: float) -> list[ev.Upload]:
    return [u for u in h.of(ev.Upload) if u.learner_id == learner and a <= u.ts <= b]


def partition_stops_uploads(h: History, r: Outcome) -> None:
    w = next(w for w in h.fault_windows() if w.kind == "partition")
    (lid,) = w.targets
    a, b = _window(h, w.fault_id)
    assert not _uploads(h, lid, a + 1.0, b), f"{lid} uploads arrived through its partition"
    assert _uploads(h, lid, b, h.end), f"{lid} never uploaded again after the heal"


def partition_majority_keeps_merging(h: History, r: Outcome) -> None:
    a, b = _window(h, "f0")
    merges = [m for m in h.of(ev.Merge) if a + 1.0 <= m.ts <= b]
    assert merges, "no merge while two of three learners were partitioned"
    assert {p.learner_id for m in merges for p in m.participants} == {"learner-2"}


def kill_one_keeps_training(h: History, r: Outcome) -> None:
    a, _ = _window(h, "f0")
    assert [m for m in h.of(ev.Merge) if m.ts > a + 1.0], "no merges after the kill"
    starts = [e for e in h.of(ev.LearnerStart) if e.learner_id == "learner-1"]
    assert len(starts) == 1, "learner-1 was restarted although the scenario never restarts it"
    assert r.report.teardown.exit_codes["learner-1"] == -9


def throttle_slows_uploads(h: History, r: Outcome) -> None:
    a, b = _window(h, "f0")
    slow = [s.seconds for s in h.of(ev.SyncResult) if a + 1.0 <= s.ts <= b and s.accepted]
    fast = [s.seconds for s in h.of(ev.SyncResult) if (s.ts < a or s.ts > b + 3.0) and s.accepted]
    assert slow and fast
    assert statistics.median(slow) > 3 * statistics.median(fast), (
        statistics.median(slow),
        statistics.median(fast),
    )


def latency_delays_syncs(h: History, r: Outcome) -> None:
    a, b = _window(h, "f0")
    during = [s.seconds for s in h.of(ev.SyncResult) if a + 1.0 <= s.ts <= b and s.accepted]
    assert during and statistics.median(during) >= 0.2, "a 200 ms round trip should show in every sync"


def straggler_is_slower(h: History, r: Outcome) -> None:
    a, b = _window(h, "f0")

    def rate(lid: str) -> float:
        steps = [s for s in h.of(ev.Step) if s.source == lid and a + 1.0 <= s.ts <= b]
        return (steps[-1].step - steps[0].step) / (steps[-1].ts - steps[0].ts)

    assert rate("learner-2") < 0.7 * rate("learner-0")


def syncer_restored(h: History, r: Outcome) -> None:
    restarts = next(v for v in r.verdicts if v.name == "durability").evidence["restarts"]
    assert isinstance(restarts, list)
    assert len(restarts) == 1 and restarts[0]["restored_from_merges"] > 0


def corrupt_rejected(h: History, r: Outcome) -> None:
    """The corrupt incarnation started, uploaded, and the syncer took none of it. (CI under load once saw no
    non_finite refusal at all: the 15 s window ended before the corrupt process had started.)"""
    corrupt = {(e.learner_id, e.learner_incarnation) for e in h.of(ev.LearnerStart) if e.corrupt}
    assert len(corrupt) == 1, f"the corrupt learner never started within its window (or started twice): {corrupt}"
    ((lid, inc),) = corrupt
    starts = sorted(e.ts for e in h.of(ev.LearnerStart) if e.learner_id == lid)
    began = next(e.ts for e in h.of(ev.LearnerStart) if e.learner_incarnation == inc)
    ended = min((t for t in starts if t > began), default=h.end)  # the healthy restart that healed it
    assert not [u for u in h.of(ev.Upload) if u.learner_incarnation == inc], "a corrupt upload was accepted"
    refused = [e for e in h.of(ev.Reject) if e.call == "Upload" and e.learner_id == lid and began <= e.ts <= ended]
    assert refused, "the corrupt learner's uploads never reached the syncer"


def every_repeat_healed(h: History, r: Outcome) -> None:
    windows = [w for w in h.fault_windows() if w.fault_id.startswith("flap.")]
    assert len(windows) == 5 and all(w.injected and w.healed for w in windows)


def rolling_reintegrates_all(h: History, r: Outcome) -> None:
    rows = next(v for v in r.verdicts if v.name == "reintegration").evidence["learners"]
    assert isinstance(rows, list)
    assert sorted(x["learner"] for x in rows) == ["learner-0", "learner-1", "learner-2"]


def plan_is_replayable(h: History, r: Outcome) -> None:
    recorded = h.plan()
    assert recorded is not None
    assert recorded.faults == [p.record() for p in plan(load_scenario(builtin_scenarios()["random-mix"]))]


EFFECTS: dict[str, Callable[[History, Outcome], None]] = {
    "asymmetric-partition": partition_stops_uploads,
    "partition-one": partition_stops_uploads,
    "partition-minority": partition_stops_uploads,
    "partition-majority": partition_majority_keeps_merging,
    "kill-one-learner": kill_one_keeps_training,
    "throttle-all": throttle_slows_uploads,
    "latency-jitter": latency_delays_syncs,
    "straggler": straggler_is_slower,
    "syncer-crash": syncer_restored,
    "corrupt-learner": corrupt_rejected,
    "flapping-link": every_repeat_healed,
    "rolling-restarts": rolling_reintegrates_all,
    "random-mix": plan_is_replayable,
}
