"""What every checker shares: the verdict type, the run facts it reads, and who was unavailable when.

A checker is a pure function ``(CheckInput) -> Verdict``: no I/O, no clock.
Three answers, as in Jepsen: ``pass``, ``fail``, and ``indeterminate`` when
the history cannot decide (e.g. the run ended before a healed learner had
time to contribute). Every verdict carries its evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np

from chaos.checkers.bounds import RunPace, run_pace
from chaos.exit_codes import for_status
from chaos.history import FaultWindow, History, Phase, Stalled
from chaos.records import JsonObject
from chaos.scenario import Checks, Scenario
from faults.kinds import removes, stops_training
from trainer import events as ev
from trainer.config import RunConfig
from trainer.core.algorithm import Algorithm
from trainer.model import EMBEDDING_TENSORS
from trainer.policy import policy_from_config

if TYPE_CHECKING:
    from chaos.checkers.learner_replay import InnerSteps

Status = Literal["pass", "fail", "indeterminate", "not_applicable"]  # the last: chaos.sut


@dataclass(frozen=True)
class Verdict:
    name: str
    status: Status
    summary: str
    evidence: JsonObject = field(default_factory=dict)  # the check's own, free-form: what it saw and measured

    def to_json(self) -> JsonObject:
        return {"name": self.name, "status": self.status, "summary": self.summary, "evidence": self.evidence}


@dataclass(frozen=True)
class MergeFacts:
    """How the run merges, for the merge audit's reference (the settings, not the trainer's code): the run's resolved
    algorithm (its rule, outer step, rounds, quorum and grace, under their config names) and the tensors every rule
    averages plainly."""

    algorithm: Algorithm = Algorithm()
    mean_tensors: tuple[str, ...] = EMBEDDING_TENSORS
    tokens_per_step: int = 0  # what a capped contribution's c_tokens is per step (0: unknown)

    @property
    def adamw(self) -> bool:
        """Data-parallel: the step is AdamW's, which the reference does not recompute."""
        return self.algorithm.mode == "data-parallel"

    @classmethod
    def of(cls, cfg: RunConfig) -> MergeFacts:
        p = policy_from_config(cfg)
        return cls(cfg.algorithm, tuple(p.mean_tensors), p.tokens_per_step)


@dataclass(frozen=True)
class RunFacts:
    """The run's configuration facts checkers need (from the scenario's cluster config)."""

    learners: tuple[str, ...]
    min_quorum: int
    checkpoint_every_merges: int
    num_fragments: int = 1
    merge: MergeFacts = MergeFacts()
    token_budget: int = 0  # 0: none
    round_tokens: int = 0  # tokens every learner trains in one round (M × H × tokens per step); 0: unknown
    sync_every: int = 8  # H: cluster steps between two rounds of a fragment
    long_poll_s: float = 2.0  # how long a learner's wait for a merged fragment lasts before it asks again
    summary_tokens: int = 0  # tokens a learner trains between two ``step`` events (0: unknown)
    report_interval_s: float = 0.5  # how often a learner reports its cumulative tokens to the syncer

    @classmethod
    def of(cls, scenario: Scenario) -> RunFacts:
        """The facts of a scenario's cluster (real and simulated runs take them the same way)."""
        return cls.of_config(scenario.cluster, tuple(scenario.learner_ids()))

    @classmethod
    def of_config(cls, cfg: RunConfig, learners: tuple[str, ...]) -> RunFacts:
        """The facts of a run config whose learners are ``learners``."""
        p = policy_from_config(cfg)
        return cls(
            learners,
            cfg.algorithm.min_quorum,
            cfg.syncer.checkpoint_every_merges,
            cfg.algorithm.num_fragments,
            MergeFacts.of(cfg),
            cfg.token_budget,
            cfg.algorithm.num_learners * cfg.algorithm.sync_every * p.tokens_per_step,
            cfg.algorithm.sync_every,
            cfg.learner.long_poll_s,
            cfg.learner.step_event_every * p.tokens_per_step,
            cfg.learner.report_interval_s,
        )


@dataclass(frozen=True)
class CheckInput:
    history: History
    facts: RunFacts
    checks: Checks
    baseline_final_loss: float | None  # None: no baseline (parity is then indeterminate)
    reference_final_loss: float | None = None  # synchronous DiLoCo on the same cluster (None: not run)
    # Excess of each fault-free run's final loss over its own entropy floor, over seeds (empty: just the one).
    baseline_band: tuple[float, ...] = ()
    # Each fault-free run's compute goodput (the goodput check's bound; empty: not measured).
    baseline_goodput: tuple[float, ...] = ()
    # The merge audit's kept merges: file name (the merge event's audit.file) -> its arrays (chaos.audit_files).
    audit_files: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    # For the whole-run re-execution (chaos.checkers.reexecution): the parameters the run's config starts the model from, and
    # the last checkpoint's arrays (empty: not given, it does not run).
    initial_params: Mapping[str, np.ndarray] = field(default_factory=dict)
    final_checkpoint: Mapping[str, np.ndarray] = field(default_factory=dict)
    # The run's inner step and data, to replay the learners (chaos.checkers.learner_replay; None: not replayed).
    inner_steps: InnerSteps | None = None

    @property
    def steady(self) -> float | None:
        p = self.history.phase("steady")
        return p.ts if isinstance(p, Phase) else None

    @property
    def finish(self) -> float:
        """When the budget was reached (the run's result): the syncer's ``finished`` event, else the run's last event."""
        done = self.history.of(ev.Finished)
        return done[0].ts if done else self.history.end

    @property
    def stalled(self) -> Stalled | None:
        """Why the progress watchdog ended the run (chaos.watchdog); None: it did not."""
        return self.history.stalled()

    @cached_property
    def pace(self) -> RunPace:
        """This run's start-up and round times, measured once for every bound derived from them."""
        return run_pace(self.history)

    @property
    def training_end(self) -> float:
        """When learners stopped: the end of the settle phase (``settled``) if there was one, else :attr:`finish`."""
        settled = self.history.of(ev.Settled)
        return settled[-1].ts if settled else self.finish


def removes_learner(w: FaultWindow) -> bool:
    """Whether the window took a learner out of training (a failed inject took nobody out)."""
    return w.injected and removes(w.kind, w.params)


def first_upload_after(history: History, learner: str, t: float) -> float | None:
    return next((u.ts for u in history.of(ev.Upload) if u.learner_id == learner and u.ts >= t), None)


def unavailable_intervals(
    history: History, learners: tuple[str, ...]
) -> tuple[dict[str, list[tuple[float, float]]], list[tuple[float, float]]]:
    """Per learner, when a fault kept it from contributing; and when the syncer was down.

    A removed learner counts as back at its first upload after the heal (restart,
    JIT and state fetch included); a crashed syncer at its next start.
    """
    end = history.end
    per: dict[str, list[tuple[float, float]]] = {lid: [] for lid in learners}
    syncer: list[tuple[float, float]] = []
    starts = [e.ts for e in history.of(ev.SyncerStart)]
    for w in history.fault_windows():
        if w.injected and stops_training(w.kind, w.targets):
            back = next((t for t in starts if w.end is not None and t >= w.end), end) if w.end is not None else end
            syncer.append((w.start, back))
        if not removes_learner(w):
            continue
        for lid in w.targets:
            if lid not in per:
                continue
            back = (first_upload_after(history, lid, w.end) or end) if w.end is not None else end
            per[lid].append((w.start, back))
    return per, syncer


def covered(t: float, intervals: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in intervals)


def uncovered_seconds(a: float, b: float, intervals: list[tuple[float, float]]) -> float:
    """Seconds of ``[a, b]`` outside every interval (overlapping intervals count once).

    >>> uncovered_seconds(0, 10, [(2, 4), (3, 5), (8, 20)])
    5.0
    >>> uncovered_seconds(0, 10, [])
    10.0
    """
    free, t = 0.0, a
    for lo, hi in sorted(intervals):
        if hi <= t:
            continue
        if lo >= b:
            break
        free += max(lo - t, 0.0)
        t = max(t, hi)
    return float(free + max(b - t, 0.0))


def overall(verdicts: list[Verdict]) -> tuple[str, int]:
    """The run's status and exit code (chaos.exit_codes): any failure fails it; else any undecided check
    leaves it indeterminate (a check not applicable to the system under test decides nothing either way)."""
    status = (
        "fail"
        if any(v.status == "fail" for v in verdicts)
        else "indeterminate"
        if any(v.status == "indeterminate" for v in verdicts)
        else "pass"
    )
    return status, int(for_status(status))
