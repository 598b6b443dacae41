"""benchmarks.costs.fault_latency, what is measured: per fault kind its parameters, hold, slot and effect; the seeded
schedule of slots; the scenario that plays it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from faults import kinds as fault_kinds
from faults.base import SYNCER

LEARNERS = ("learner-0", "learner-1")

PROBE_DEADLINE_S = 0.5  # a probe call's deadline, unless its kind sets one
LEAD_S = 0.3  # a network slot's probe starts this long before the fault: the baseline round trip
JITTER_S = 0.1  # start jitter (the controller polls every 0.1 s: spread the starts over its phase)
FIRST_SLOT_S = 1.0  # seconds after steady state before the first slot


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


# Of the kinds local processes and the real Toxiproxy can inject: those on a learner's link, and those whose
# recovery is a new learner incarnation.
NETWORK_KINDS = frozenset(k for k in fault_kinds.LOCAL_KINDS if fault_kinds.KINDS[k].family == "network")
RESTART_KINDS = frozenset(k for k in fault_kinds.LOCAL_KINDS if fault_kinds.KINDS[k].restarts) - {"syncer_crash"}

KINDS: dict[str, KindSpec] = {
    k.kind: k
    for k in (
        # Restarts import JAX: ~1 s on an idle machine, 3-10 s under load (measured here); a syncer restart also
        # blocks the controller's loop until the new syncer listens, so its slot is the longest.
        KindSpec("kill", {}, 1.0, 8.0, "pid dead", "new incarnation in Status", stable_s=0.0),
        KindSpec("stop", {}, 1.0, 8.0, "pid exited", "new incarnation in Status", stable_s=0.0),
        KindSpec("pause", {}, 0.5, 1.5, "state T", "state not T", stable_s=0.0),
        KindSpec(
            "slow", {"fraction": 0.5, "period_s": 0.1}, 0.6, 1.8, "first state T", "not T for 0.3 s", stable_s=0.3
        ),
        KindSpec(
            "syncer_crash",
            {},
            1.0,
            14.0,
            "syncer pid dead",
            "new syncer answers Status",
            stable_s=0.0,
            learner_target=False,
        ),
        # the effect waits for the corrupt restart to join, train H steps and upload: hold long enough for that
        KindSpec(
            "corrupt",
            {"mode": "nan"},
            10.0,
            16.0,
            "non_finite rejections rise",
            "healthy incarnation listed",
            stable_s=0.0,
        ),
        # a short deadline, so several calls fit in the hold (a black hole answers nothing: no need to wait longer)
        KindSpec(
            "partition",
            {"direction": "both"},
            0.5,
            1.8,
            "2 probe calls get no answer in 100 ms",
            "probe OK for 0.1 s",
            deadline_s=0.1,
        ),
        KindSpec("link_down", {}, 0.5, 1.8, "probe call fails", "probe OK for 0.1 s"),
        KindSpec(
            "bandwidth",
            {"rate_kbps": 1},
            0.8,
            2.0,
            "2 probe RTTs ≥ base + ½·bytes/rate",
            "RTT back for 0.1 s",
            probe_rpc="status",
        ),
        KindSpec("latency", {"latency_ms": 100}, 0.8, 2.0, "2 probe RTTs ≥ base + 100 ms", "RTT back for 0.1 s"),
        KindSpec("reset_peer", {"timeout_ms": 0}, 0.5, 1.8, "probe call fails (reset)", "probe OK for 0.1 s"),
        KindSpec(
            "data_limit",
            {"bytes": 500},
            0.5,
            1.8,
            "probe call fails (closed)",
            "probe OK for 0.25 s",
            stable_s=0.25,
        ),
    )
}


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
        return {
            "fault": self.kind,
            "id": self.fault_id,
            "targets": [self.target],
            "at": self.at,
            "duration": self.duration,
            **KINDS[self.kind].params,
        }


def build_schedule(
    kinds: Sequence[str],
    repeats: int,
    rng: random.Random,
    learners: Sequence[str] = LEARNERS,
    first_s: float = FIRST_SLOT_S,
    repeats_of: dict[str, int] | None = None,
) -> list[Slot]:
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
        slots.append(
            Slot(i, f"s{i:02d}-{kind}", kind, target, round(t, 3), at, spec.hold_s, round(t + spec.slot_s, 3))
        )
        t += spec.slot_s
    return slots
