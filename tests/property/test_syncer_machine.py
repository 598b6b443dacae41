"""Stateful property test of the pure syncer state machine (:mod:`trainer.core.syncer_state`).

Why: the unit tests pin one behaviour each; the chaos scenarios exercise the real
processes but only a handful of interleavings. This Hypothesis machine drives
random interleavings of join / submit / clock / merge / crash+restore / partition /
leave / report against a small reference model of the syncer and checks, after
every step, the safety properties the chaos checkers rely on:

- versions never go backwards (also across restores, which skip ahead), and move
  by exactly +1 per merge and +N (the checkpoint interval) per restore;
- a contribution key (learner, incarnation, fragment, base) is merged at most once
  into the parameters that survive (see ``effective_keys``);
- an upload that ``submit`` rejected is never a merge participant;
- an accepted upload is pending, merged, replaced by a later upload of the same
  learner to the same round, dropped by a refused (non-finite) merge, or lost in
  a crash -- never silently lost otherwise;
- parameters stay finite while ``validate_uploads`` is on;
- ``merges_total`` = merges restored from the checkpoint + successful merges since,
  and ``checkpoint_due()`` holds exactly at start, right after a restore and after
  each interval of merges;
- every reply (accept, duplicate, each rejection reason, join indexes, the
  budget's ``finished``, which rounds are due) matches the model.

No I/O and no wall clock: ``self.now`` is a virtual clock advanced by a rule. The
shell is modelled as trainer/syncer.py behaves: it checkpoints (in memory here)
whenever ``checkpoint_due()`` says so -- at start, right after a restore, after every
``checkpoint_every_merges`` merges -- and once more when the token budget is reached.
A "crash" throws the state away and restores the latest checkpoint with
``SyncerState.from_checkpoint(..., version_skip=N)``.

This machine found two bugs, since fixed (see tests/unit/test_core_syncer_state.py):
a second crash restored the same checkpoint and versions went backwards (the shell
only checkpointed at ``merges_total % N == 0``), and with ``max_staleness`` above the
interval a retried upload was merged twice (merged keys were not checkpointed).

Budget: ``SYNCER_MACHINE_EXAMPLES`` (default 200: ~2-3 ms a step, so ~5 s on an idle
2-core machine; at 60 examples some planted mutations went unnoticed) and
``SYNCER_MACHINE_STEPS`` (default 40).
"""

from __future__ import annotations

import copy
import os
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.support import syncer_policy
from trainer.core.ema import Ema
from trainer.core.fragments import partition_tensors
from trainer.core.grace import Timing, merge_time
from trainer.core.merge import fragment_norm
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.syncer_driver import Action, Merged, MergeRefused, ResultFixed, tick
from trainer.core.syncer_records import Contribution
from trainer.core.syncer_state import SyncerState

EXAMPLES = int(os.environ.get("SYNCER_MACHINE_EXAMPLES", "200"))
STEPS = int(os.environ.get("SYNCER_MACHINE_STEPS", "40"))

SIZES = {"a": 4, "b": 3}
FRAGMENTS = partition_tensors(SIZES, 2)
LEARNERS = ("L0", "L1", "L2")
STRANGER = "X9"  # never joins
LIVENESS_S = 5.0
GRACE_CAP_STEPS = 1.0
MERGE_SECONDS = 0.01  # what the shell would measure per merge and feed to observe_merge_seconds
NO_EVALS = 1 << 30  # evals are not modelled: the driver's eval flag never comes up
HUGE = 3.0e38  # finite in float32, but an outer step on it overflows: provokes FloatingPointError

Key = tuple[str, str, int, int, int]
# Strategies by argument; typed Any for rule(**...): mypy would match a **dict of strategies to its targets= too.
SUBMIT_ARGS: dict[str, Any] = dict(
    learner=st.sampled_from(LEARNERS * 3 + (STRANGER,)),
    old_incarnation=st.sampled_from([False] * 5 + [True]),
    fragment=st.integers(0, len(FRAGMENTS) - 1),
    base=st.sampled_from(["current"] * 4 + ["lag", "lag", "too_stale", "future", "dup", "retry", "retry"]),
    fault=st.sampled_from(
        ["none"] * 8
        + ["zero", "nan", "nan", "huge", "huge", "bad_shape", "bad_dtype", "bad_counters", "unknown_fragment"]
    ),
    c_steps=st.sampled_from([0, 1, 4]),
    c_tokens=st.sampled_from([0, 16, 64]),
    upload_seconds=st.sampled_from([0.0, 0.0, 0.2]),
    pick=st.integers(0, 10**6),
    seed=st.integers(0, 2**16),
    merge_after=st.sampled_from([True, True, False]),
)
UPLOAD_ARGS: dict[str, Any] = dict(
    learner=st.sampled_from(LEARNERS),
    fragment=st.integers(0, len(FRAGMENTS) - 1),
    base=st.sampled_from(["current", "current", "lag"]),
    c_steps=st.sampled_from([1, 4]),
    c_tokens=st.sampled_from([16, 64]),
    seed=st.integers(0, 2**16),
    merge_after=st.sampled_from([True, True, False]),
)
REJOIN_REASONS = {
    RejectReason.UNKNOWN_LEARNER,
    RejectReason.LEFT_LEARNER,
}  # a learner joins again (same incarnation)
MEMBERSHIP = {
    RejectReason.FINISHED,
    RejectReason.UNKNOWN_LEARNER,
    RejectReason.STALE_INCARNATION,
    RejectReason.LEFT_LEARNER,
}
FIELD_REASONS = {RejectReason.BAD_COUNTERS, RejectReason.UNKNOWN_FRAGMENT}  # refused before the record is touched


@dataclass
class Sub:
    """One upload attempt and what became of it (rejected/duplicate/pending/merged/replaced/dropped/crashed)."""

    contribution: Contribution
    status: str


@dataclass
class ModelRound:
    base_version: int
    opened_at: float
    quorum_at: float | None = None
    contribs: dict[str, Sub] = field(default_factory=dict)  # insertion order = the state's order


@dataclass
class ModelLearner:
    incarnation: str
    index: int
    last_seen: float
    left: bool = False


@dataclass(frozen=True)
class Checkpoint:
    """An in-memory checkpoint plus the model facts it captures."""

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]
    effective_keys: frozenset[Key]  # the merges the checkpointed parameters contain
    merged_keys: frozenset[Key]  # what the syncer answered "duplicate" for when it was taken


def _call(fn: Callable[[], Any]) -> tuple[Any, RejectReason | None]:
    """Run ``fn``; return (result, None) or (None, reason) when it raised Rejected."""
    try:
        return fn(), None
    except Rejected as err:
        return None, err.reason


def _opt_leaves(state: SyncerState) -> list[list[np.ndarray]]:
    return [[np.array(x) for x in jax.tree_util.tree_leaves(s)] for s in state.opt_states]


def _same_arrays(xs: list[np.ndarray], ys: list[np.ndarray]) -> bool:
    return len(xs) == len(ys) and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(xs, ys))


class SyncerMachine(RuleBasedStateMachine):
    """Drives one SyncerState and a reference model side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.state: SyncerState | None = None

    @property
    def live(self) -> SyncerState:
        """The state under test in a rule (setup, which Hypothesis runs before any rule, made it)."""
        assert self.state is not None
        return self.state

    # ---- setup ------------------------------------------------------------
    @initialize(
        min_quorum=st.integers(1, 2),
        grace=st.booleans(),
        max_staleness=st.integers(0, 3),
        checkpoint_every=st.integers(1, 3),
        validate=st.sampled_from([True, True, True, False]),
        merge_rule=st.sampled_from(["rda", "mean"]),
        momentum=st.sampled_from([0.0, 0.9]),
        token_budget=st.sampled_from([0, 150]),
        random_params=st.booleans(),
        seed=st.integers(0, 2**16),
        prejoin=st.sampled_from([True, True, True, False]),
        mean_b=st.booleans(),
        norm_guard=st.booleans(),
    )
    def setup(
        self,
        min_quorum: int,
        grace: bool,
        max_staleness: int,
        checkpoint_every: int,
        validate: bool,
        merge_rule: str,
        momentum: float,
        token_budget: int,
        random_params: bool,
        seed: int,
        prejoin: bool,
        mean_b: bool,
        norm_guard: bool,
    ) -> None:
        """A small cluster: 3 learners, 2 fragments over 2 tiny float32 tensors."""
        # The outlier-norm guard refuses huge finite uploads; switch it off in half the runs so huge values
        # reach a merge and the refused-merge (FloatingPointError) path is exercised too.
        self.policy = syncer_policy(
            len(FRAGMENTS),
            num_learners=len(LEARNERS),
            min_quorum=min_quorum,
            grace=grace,
            grace_gamma=0.5,
            grace_cap_steps=GRACE_CAP_STEPS,
            overlap_steps=2,
            merge_rule=merge_rule,
            mean_tensors=("b",) if mean_b else (),
            outer_lr=0.7,
            outer_momentum=momentum,
            token_budget=token_budget,
            liveness_timeout_s=LIVENESS_S,
            validate_uploads=validate,
            max_staleness=max_staleness,
            checkpoint_every_merges=checkpoint_every,
            max_norm_ratio=100.0 if norm_guard else 0.0,
            rounds="arrival",
        )
        self.every = checkpoint_every
        rng = np.random.default_rng(seed)
        params = {
            n: (rng.standard_normal(s) if random_params else np.zeros(s)).astype(np.float32)
            for n, s in SIZES.items()
        }
        self.state = SyncerState.create(self.policy, FRAGMENTS, params)
        self.now = 0.0
        self.subs: list[Sub] = []
        self.proc_incs: dict[str, list[str]] = {}  # the learner processes' own incarnations (last = current)
        self.cut_until: dict[str, float] = {}  # partitioned learners: calls do not arrive before this time
        self.high_water = [0] * len(FRAGMENTS)
        self.checkpoint: Checkpoint | None = None
        self.result_fixed = False
        self.min_norm: list[float | None] = [None] * len(FRAGMENTS)  # smallest accepted per-step norm, whole run
        self.ever_merged: dict[Key, int] = {}  # across the whole run, lost merges included (reported only)
        self._reset_model(
            versions=[0] * len(FRAGMENTS),
            restored=-1,
            counts={},
            tokens={},
            stopped=False,
            effective=frozenset(),
            merged_keys=frozenset(),
        )
        self._checkpoint_if_due()  # at start: a crash before the first interval must not restart from scratch
        if prejoin:  # most runs start with everyone joined, so uploads get past membership
            for learner in LEARNERS:
                self._join(learner, "fresh")

    def _reset_model(
        self,
        versions: list[int],
        restored: int,
        counts: dict[str, int],
        tokens: dict[str, int],
        stopped: bool,
        effective: frozenset[Key],
        merged_keys: frozenset[Key],
    ) -> None:
        """What a freshly created / restored syncer holds."""
        self.versions = list(versions)
        self.restored_merges = max(restored, 0)
        self.restored_from = restored
        self.merges_since_restore = 0
        self.learners: dict[str, ModelLearner] = {}
        self.counts = dict(counts)
        self.tokens = dict(tokens)
        self.stopped = stopped
        self.rounds: dict[int, ModelRound] = {}
        a = self.policy.ema_alpha
        self.timing = Timing.with_alpha(a)
        self.upload_emas: dict[str, Ema] = {}
        self.merged_keys: set[Key] = set(merged_keys)  # what the syncer must still answer "duplicate" for
        self.saved_at: int | None = None  # merges_total at the last checkpoint since start/restore
        self.effective_keys: set[Key] = set(effective)  # merges that the current parameters contain

    # ---- model helpers ----------------------------------------------------
    def _norm_ratio(self) -> float:
        """The outlier-norm bound (0: off; it is only checked while uploads are validated)."""
        return self.policy.max_norm_ratio if self.policy.validate_uploads else 0.0

    def _member_reason(self, learner: str, inc: str) -> RejectReason | None:
        rec = self.learners.get(learner)
        if rec is None:
            return RejectReason.UNKNOWN_LEARNER
        if rec.incarnation != inc:
            return RejectReason.STALE_INCARNATION
        if rec.left:
            return RejectReason.LEFT_LEARNER
        return None

    def _pending(self, key: Key) -> bool:
        rnd = self.rounds.get(key[2])
        sub = rnd.contribs.get(key[0]) if rnd is not None else None
        return sub is not None and sub.contribution.key == key

    def _active_count(self) -> int:
        return sum(1 for r in self.learners.values() if not r.left and self.now - r.last_seen <= LIVENESS_S)

    def _merge_time(self, p: int) -> float | None:
        rnd = self.rounds.get(p)
        if rnd is None or not rnd.contribs:
            return None
        if self.stopped:
            return rnd.opened_at
        return merge_time(
            self.policy.algorithm.quorum, self.timing, rnd.quorum_at, len(rnd.contribs), self._active_count()
        )

    def _due(self) -> list[int]:
        return sorted(p for p in self.rounds if (t := self._merge_time(p)) is not None and t <= self.now)

    def _predict_submit(
        self, c: Contribution, tensor_specs: dict[str, tuple[tuple[int, ...], str]]
    ) -> tuple[RejectReason | None, bool]:
        """(rejection reason, duplicate) that the module docstring's rules give for ``c`` now."""
        if self.stopped:
            return RejectReason.FINISHED, False
        # The fields first: a refused message must not touch the learner's record (its liveness included).
        if c.c_steps < 0 or c.c_tokens < 0:
            return RejectReason.BAD_COUNTERS, False
        if c.base_version < 0:
            return RejectReason.FUTURE_VERSION, False  # never issued
        if not 0 <= c.fragment < len(FRAGMENTS):
            return RejectReason.UNKNOWN_FRAGMENT, False
        reason = self._member_reason(c.learner_id, c.incarnation)
        if reason is not None:
            return reason, False
        v = self.versions[c.fragment]
        if c.key in self.merged_keys or self._pending(c.key):
            return None, True
        if c.base_version < v - self.policy.algorithm.max_staleness:
            return RejectReason.STALE_VERSION, False
        if c.base_version > v:
            return RejectReason.FUTURE_VERSION, False
        expected = {n: ((SIZES[n],), "float32") for n in FRAGMENTS[c.fragment].names}
        if set(tensor_specs) != set(expected):
            return RejectReason.BAD_SHAPE, False
        for n, (shape, dtype) in tensor_specs.items():
            if shape != expected[n][0]:
                return RejectReason.BAD_SHAPE, False
            if dtype != expected[n][1]:
                return RejectReason.BAD_DTYPE, False
        if self.policy.validate_uploads and not all(np.all(np.isfinite(t)) for t in c.tensors.values()):
            return RejectReason.NON_FINITE, False
        return None, False

    def _checkpoint_due(self) -> bool:
        """None taken since start/restore, or an interval of merges since the last one."""
        merges = self.restored_merges + self.merges_since_restore
        return self.saved_at is None or merges - self.saved_at >= self.every

    def _checkpoint_if_due(self) -> None:
        """What the shell does at start, after a restore and after each merge."""
        assert self.live.checkpoint_due() == self._checkpoint_due()
        if self._checkpoint_due():
            self._take_checkpoint()

    def _take_checkpoint(self) -> None:
        arrays, meta = self.live.to_checkpoint()
        self.checkpoint = Checkpoint(
            {k: np.array(v, copy=True) for k, v in arrays.items()},
            copy.deepcopy(meta),
            frozenset(self.effective_keys),
            frozenset(self.merged_keys),
        )
        self.saved_at = self.live.merges_total
        assert meta["versions"] == self.versions and meta["merges_total"] == self.live.merges_total
        assert meta["finished"] == self.stopped and meta["tokens_by_incarnation"] == self.tokens
        assert {tuple(k) for k in meta["merged_keys"]} == self.merged_keys

    # ---- membership -------------------------------------------------------
    @rule(learner=st.sampled_from(LEARNERS), kind=st.sampled_from(["fresh", "same", "same", "empty"]))
    def join(self, learner: str, kind: str) -> None:
        """Join with a fresh incarnation (a restarted process) or the same one again (a retry / syncer restart)."""
        self._join(learner, kind)

    def _join(self, learner: str, kind: str) -> None:
        if self._cut(learner):
            return
        incs = self.proc_incs.setdefault(learner, [])
        if kind == "fresh" or (kind == "same" and not incs):
            incs.append(f"{learner}#{len(incs)}")
        inc = "" if kind == "empty" else incs[-1] if incs else ""
        result, reason = _call(lambda: self.live.join(learner, inc, now=self.now))
        if not inc:
            assert reason is RejectReason.MALFORMED
            return
        assert reason is None
        rec = self.learners.get(learner)
        if rec is not None and rec.incarnation == inc and not rec.left:
            rec.last_seen = self.now
            index, rejoined = rec.index, True
        else:
            index = self.counts.get(learner, 0)
            self.counts[learner] = index + 1
            rejoined = rec is not None or index > 0
            self.learners[learner] = ModelLearner(inc, index, self.now)
        assert (result.incarnation_index, result.rejoined) == (index, rejoined)
        assert list(result.versions) == self.versions

    @rule(learner=st.sampled_from(LEARNERS + (STRANGER,)), old_incarnation=st.booleans())
    def leave(self, learner: str, old_incarnation: bool) -> None:
        """A graceful leave; after it the learner's uploads are refused with left_learner."""
        if self._cut(learner):
            return
        inc = self._incarnation_for(learner, old_incarnation)
        _, reason = _call(lambda: self.live.leave(learner, inc, now=self.now))
        expected = self._member_reason(learner, inc)
        assert reason == expected
        if expected is None:
            self.learners[learner].last_seen = self.now
            self.learners[learner].left = True

    def _incarnation_for(self, learner: str, old: bool) -> str:
        incs = self.proc_incs.get(learner, [])
        if not incs:
            return f"{learner}#never"
        return incs[0] if old else incs[-1]

    def _cut(self, learner: str) -> bool:
        return self.now < self.cut_until.get(learner, 0.0)

    @rule(learner=st.sampled_from(LEARNERS), for_s=st.sampled_from([LIVENESS_S + 1.0, 3 * LIVENESS_S]))
    def partition(self, learner: str, for_s: float) -> None:
        """The learner's calls stop reaching the syncer for a while: it outlives the liveness timeout."""
        self.cut_until[learner] = self.now + for_s

    @rule(learner=st.sampled_from(LEARNERS))
    def heal(self, learner: str) -> None:
        self.cut_until.pop(learner, None)

    @rule(dt=st.sampled_from([0.0, 0.05, 0.05, 0.3, 0.3, 1.0, 2.5, LIVENESS_S + 1.0]), merge_after=st.booleans())
    def advance_clock(self, dt: float, merge_after: bool) -> None:
        """Mostly small steps (most time passes inside a grace window), sometimes past the liveness timeout."""
        self.now += dt
        if merge_after:
            self._merge_due()  # the merge loop woke at its deadline

    # ---- reports and budget -----------------------------------------------
    @rule(
        learner=st.sampled_from(LEARNERS + (STRANGER,)),
        tokens=st.sampled_from([-1, 0, 40, 90]),
        step=st.sampled_from([-1, 0, 5]),
        step_time=st.sampled_from([0.0, 0.2, 1.0, 3.0]),
    )
    def report(self, learner: str, tokens: int, step: int, step_time: float) -> None:
        """Progress report; once the token budget is reached (and no settle phase) the syncer stops."""
        if self._cut(learner):
            return
        inc = self._incarnation_for(learner, False)
        result, reason = _call(lambda: self.live.report(learner, inc, step, tokens, step_time, now=self.now))
        if step < 0 or tokens < 0:
            assert reason is RejectReason.BAD_COUNTERS
            return
        expected = self._member_reason(learner, inc)
        assert reason == expected
        if expected is not None:
            if reason in REJOIN_REASONS and learner in LEARNERS:
                self._join(learner, "same")
            return
        self.learners[learner].last_seen = self.now
        key = f"{learner}/{inc}"
        self.tokens[key] = max(tokens, self.tokens.get(key, 0))
        if step_time > 0:
            self.timing = self.timing.observe_step(step_time)
        if self.policy.token_budget and sum(self.tokens.values()) >= self.policy.token_budget:
            if not self.stopped:
                event("token budget reached")
            self.stopped = True
        assert result is self.stopped

    @rule(step_time=st.sampled_from([0.0, 0.2, 0.5, 1.0]), progress=st.sampled_from([0, 30, 60]))
    def heartbeats(self, step_time: float, progress: int) -> None:
        """Every reachable learner reports (as learners do each interval): who stays silent times out, the
        step-time average the grace window is computed from moves, and tokens count towards the budget."""
        for learner in LEARNERS:
            if learner in self.proc_incs:
                key = f"{learner}/{self._incarnation_for(learner, False)}"
                self.report(learner, tokens=self.tokens.get(key, 0) + progress, step=1, step_time=step_time)

    # ---- uploads ----------------------------------------------------------
    # Two identical rules each (submit, upload): uploads are the bulk of a syncer's traffic and where most
    # of its rules live, so they are drawn twice as often as membership and clock events.
    @rule(**SUBMIT_ARGS)
    def submit(self, **kw: Any) -> None:
        """Upload an outer gradient: current, lagging, too stale, future, or the key of an earlier upload;
        from a member, an old incarnation or a stranger; finite, NaN, huge, or malformed."""
        self._submit(**kw)

    @rule(**SUBMIT_ARGS)
    def submit_more(self, **kw: Any) -> None:
        self._submit(**kw)

    @rule(**UPLOAD_ARGS)
    def upload(self, **kw: Any) -> None:
        """A member's finite upload at the current (or a tolerated older) base version."""
        self._submit(old_incarnation=False, fault="none", upload_seconds=0.0, pick=0, **kw)

    @rule(**UPLOAD_ARGS)
    def upload_more(self, **kw: Any) -> None:
        self._submit(old_incarnation=False, fault="none", upload_seconds=0.0, pick=0, **kw)

    @rule(
        learner=st.sampled_from(LEARNERS),
        fragment=st.integers(0, len(FRAGMENTS) - 1),
        seed=st.integers(0, 2**16),
        merge_after=st.booleans(),
    )
    def restart_learner(self, learner: str, fragment: int, seed: int, merge_after: bool) -> None:
        """A learner process restarts: it joins with a fresh incarnation and uploads again, replacing what its
        old incarnation left pending in the round."""
        self._join(learner, "fresh")
        self._submit(learner, False, fragment, "current", "none", 1, 16, 0.0, 0, seed, merge_after)

    @rule(learner=st.sampled_from(LEARNERS), fragment=st.integers(0, len(FRAGMENTS) - 1))
    def corrupt_upload(self, learner: str, fragment: int) -> None:
        """A member with corrupted memory uploads finite values so large that the outer step overflows."""
        self._submit(learner, False, fragment, "current", "huge", 1, 16, 0.0, 0, 0, True)

    def _submit(
        self,
        learner: str,
        old_incarnation: bool,
        fragment: int,
        base: str,
        fault: str,
        c_steps: int,
        c_tokens: int,
        upload_seconds: float,
        pick: int,
        seed: int,
        merge_after: bool,
    ) -> None:
        # "dup": the key of any earlier upload; "retry": of one the syncer took (its ack may have been lost).
        earlier = (
            self.subs if base == "dup" else [x for x in self.subs if x.status not in ("rejected", "duplicate")]
        )
        if base in ("dup", "retry") and earlier:
            learner, inc, fragment, base_version, _ = earlier[pick % len(earlier)].contribution.key
        else:
            inc = self._incarnation_for(learner, old_incarnation)
            v = self.versions[fragment] if fragment < len(FRAGMENTS) else 0
            s = self.policy.algorithm.max_staleness
            base_version = {
                "current": v,
                "lag": v - (pick % (s + 1)),
                "too_stale": v - s - 1,
                "future": v + 1 + pick % 2,
            }.get(base, v)
            if fault == "unknown_fragment":
                fragment = len(FRAGMENTS)
        if self._cut(learner):
            return
        if fault == "bad_counters":
            c_steps, c_tokens = (-1, c_tokens) if pick % 2 else (c_steps, -1)
        names = FRAGMENTS[fragment].names if fragment < len(FRAGMENTS) else FRAGMENTS[0].names
        rng = np.random.default_rng(seed)
        tensors: dict[str, np.ndarray] = {}
        for i, n in enumerate(names):
            shape = (SIZES[n] + 1,) if fault == "bad_shape" and i == 0 else (SIZES[n],)
            dtype = np.float64 if fault == "bad_dtype" and i == 0 else np.float32
            if fault == "zero":
                t = np.zeros(shape)
            elif fault == "huge":
                t = np.full(shape, HUGE)
            else:
                t = rng.standard_normal(shape)
                if fault == "nan":
                    t[0] = np.nan
            tensors[n] = t.astype(dtype)
        c = Contribution(learner, inc, fragment, base_version, tensors, c_steps, c_tokens, upload_seconds)
        specs = {n: (tuple(t.shape), str(t.dtype)) for n, t in tensors.items()}
        expected, duplicate = self._predict_submit(c, specs)
        result, reason = _call(lambda: self.live.submit(c, now=self.now))
        norm = fragment_norm(c.tensors) / max(c.c_steps, 1) if fragment < len(FRAGMENTS) else 0.0
        if reason is RejectReason.OUTLIER_NORM and expected is None and not duplicate:
            # A syncer with max_norm_ratio refuses an update far above a moving average of the accepted
            # per-step norms; that average is >= the smallest accepted one, so this is necessary for a refusal.
            floor = self.min_norm[fragment]
            assert self._norm_ratio() > 0 and floor is not None and norm > self._norm_ratio() * floor, (
                f"outlier_norm for norm {norm} (smallest accepted {floor})"
            )
            expected = reason
        assert reason == expected, f"submit {c.key} ({fault}): got {reason}, expected {expected}"
        event(f"submit: {reason.value if reason else 'duplicate' if duplicate else 'accepted'}")
        if reason is None:  # accepted (a duplicate too): the learner is alive; a refused upload is no sign of life
            self.learners[learner].last_seen = self.now
        if reason is not None:
            self.subs.append(Sub(c, "rejected"))
            if reason in REJOIN_REASONS and learner in LEARNERS:
                self._join(learner, "same")  # what a learner does when the syncer forgot it or saw it leave
            return
        assert (
            result.accepted and result.duplicate == duplicate and result.current_version == self.versions[fragment]
        )
        if duplicate:
            self.subs.append(Sub(c, "duplicate"))
            return
        sub = Sub(c, "pending")
        self.subs.append(sub)
        if self.policy.validate_uploads:
            least = self.min_norm[fragment]
            self.min_norm[fragment] = norm if least is None else min(norm, least)
        rnd = self.rounds.get(fragment)
        if rnd is None:
            rnd = self.rounds[fragment] = ModelRound(self.versions[fragment], self.now)
        if learner in rnd.contribs:
            event("an upload replaces the same learner's pending one")
            rnd.contribs[learner].status = "replaced"
        rnd.contribs[learner] = sub
        if rnd.quorum_at is None and len(rnd.contribs) >= self.policy.algorithm.min_quorum:
            rnd.quorum_at = self.now
            self.timing = self.timing.observe_quorum(self.now - rnd.opened_at)
        if upload_seconds > 0:  # t_upload: the median over learners of each one's moving average (invariant round)
            ema = self.upload_emas.get(learner, Ema(self.policy.ema_alpha)).update(upload_seconds)
            self.upload_emas[learner] = ema
            median = statistics.median_low([e.get() for e in self.upload_emas.values()])
            self.timing = replace(self.timing, t_upload=replace(self.timing.t_upload, value=median))
        if merge_after:
            self._merge_due()  # the upload wakes the merge loop, which merges whatever is due

    # ---- merging ----------------------------------------------------------
    @rule()
    def merge_due(self) -> None:
        """What the syncer's merge loop does: merge every due round, checkpoint every N merges."""
        self._merge_due()

    def _merge_due(self) -> None:
        """One tick of the syncer's driver (trainer.core.syncer_driver), as both shells carry it out: every due round
        merged in order, a checkpoint after each that makes one due, the result fixed once the budget is reached
        and nothing more is due (no settle phase here: settle_s is 0, so the budget finishes the syncer at once)."""
        due = self.live.due_merges(self.now)
        assert due == self._due()
        actions = tick(self.live, self.now, eval_every=NO_EVALS, result_fixed=self.result_fixed)
        for p in due:
            self._merge_one(p, actions)
        rest = list(actions)
        if rest:
            assert rest == [ResultFixed()] and self.stopped and not self.result_fixed, rest
            event("the driver fixed the result")
            self.result_fixed = True
            self._take_checkpoint()  # the shells checkpoint the result (trainer/syncer.py _finalize_locked)
        else:
            assert self.result_fixed or not self.stopped or self.live.due_merges(self.now), (
                "the result was not fixed"
            )

    def _merge_one(self, p: int, actions: Iterator[Action]) -> None:
        rnd = self.rounds[p]
        live = self.live.rounds[p].contributions
        assert all(live[lid] is sub.contribution for lid, sub in rnd.contribs.items())  # by identity
        params0 = {n: v.copy() for n, v in self.live.params.items()}
        opt0 = _opt_leaves(self.live)
        merges0 = self.live.merges_total
        a = next(actions)  # the driver merges p now
        assert isinstance(a, (Merged, MergeRefused)) and a.fragment == p, a
        if isinstance(a, MergeRefused):
            # Refused merge: the round is dropped; parameters, versions and momentum stay as they were.
            assert self.policy.validate_uploads, "FloatingPointError with validate_uploads off"
            event("merge: refused (non-finite)")
            assert p not in self.live.rounds
            assert self.live.versions == self.versions and self.live.merges_total == merges0
            assert _same_arrays([params0[n] for n in SIZES], [self.live.params[n] for n in SIZES])
            assert all(_same_arrays(a, b) for a, b in zip(opt0, _opt_leaves(self.live)))
            for sub in self.rounds.pop(p).contribs.values():
                sub.status = "dropped"
            return
        rec = a.record
        self.rounds.pop(p)
        subs = list(rnd.contribs.values())
        event(f"merge: {len(subs)} participant(s)")
        got = [(x.learner_id, x.incarnation, x.base_version, x.c_steps, x.c_tokens) for x in rec.participants]
        want = [
            (
                s.contribution.learner_id,
                s.contribution.incarnation,
                s.contribution.base_version,
                s.contribution.c_steps,
                s.contribution.c_tokens,
            )
            for s in subs
        ]
        assert len(rec.participants) == len(subs)
        assert got == want, f"participants {got} != pending {want}"
        assert all(s.status == "pending" for s in subs), "a rejected/replaced upload took part in a merge"
        assert abs(sum(x.weight for x in rec.participants) - 1.0) < 1e-9
        assert (rec.fragment, rec.base_version, rec.version) == (p, rnd.base_version, self.versions[p] + 1)
        assert rec.merges_total == merges0 + 1 == self.live.merges_total
        for s in subs:
            key = s.contribution.key
            assert key not in self.effective_keys, f"contribution {key} merged twice into the surviving params"
            self.effective_keys.add(key)
            self.merged_keys.add(key)
            if key in self.ever_merged:
                event("an upload whose merge a crash lost is merged again")
            self.ever_merged[key] = self.ever_merged.get(key, 0) + 1
            s.status = "merged"
        self.versions[p] += 1
        self.merges_since_restore += 1
        # Keys too old to be accepted again are forgotten (they would be stale anyway).
        s_ = self.policy.algorithm.max_staleness
        self.merged_keys = {k for k in self.merged_keys if k[3] >= self.versions[k[2]] - s_ - 1}
        for n in SIZES:
            if n not in FRAGMENTS[p].names:
                assert np.array_equal(self.live.params[n], params0[n], equal_nan=True), "other fragment changed"
        self.live.observe_merge_seconds(MERGE_SECONDS)
        self.timing = self.timing.observe_merge(MERGE_SECONDS)
        assert a.checkpoint == self._checkpoint_due(), "the driver's checkpoint flag is not the model's"
        self._checkpoint_if_due()

    @precondition(lambda self: self.stopped and not self.result_fixed)
    @rule()
    def finalize(self) -> None:
        """The budget was reached by a report: the merge loop's next tick merges what is due and fixes the result,
        checkpointing once more (trainer/syncer.py _finalize_locked)."""
        self._merge_due()

    # ---- crash ------------------------------------------------------------
    @rule()
    def crash_and_restart(self) -> None:
        """Kill the syncer; restore the latest checkpoint, every version skipping ahead by the interval."""
        ck = self.checkpoint
        assert ck is not None  # one is taken at start
        event("crash+restore")
        self.state = SyncerState.from_checkpoint(
            self.policy, FRAGMENTS, ck.arrays, ck.meta, version_skip=self.every
        )
        for rnd in self.rounds.values():
            for sub in rnd.contribs.values():
                sub.status = "crashed"  # pending uploads die with the process, by design
        self._reset_model(
            versions=[v + self.every for v in ck.meta["versions"]],
            restored=ck.meta["merges_total"],
            counts=ck.meta["incarnation_counts"],
            tokens=ck.meta["tokens_by_incarnation"],
            stopped=ck.meta["finished"],
            effective=ck.effective_keys,
            merged_keys=ck.merged_keys,
        )
        self.result_fixed = False
        for k, v in ck.arrays.items():
            if k.startswith("param/"):
                assert np.array_equal(self.live.params[k.split("/", 1)[1]], v, equal_nan=True)
        for p, leaves in enumerate(_opt_leaves(self.live)):
            assert _same_arrays(leaves, [ck.arrays[f"opt/{p}/{i}"] for i in range(len(leaves))])
        assert self.live.checkpoint_due(), "a second crash would restore these versions again"
        self._checkpoint_if_due()

    # ---- invariants -------------------------------------------------------
    @invariant()
    def versions_never_decrease(self) -> None:
        if self.state is None:
            return
        for p, v in enumerate(self.state.versions):
            assert v >= self.high_water[p], f"fragment {p}: version {v} after {self.high_water[p]}"
            self.high_water[p] = v

    @invariant()
    def versions_follow_merges(self) -> None:
        """+1 per merge, +N per restore, nothing else."""
        if self.state is not None:
            assert self.state.versions == self.versions

    @invariant()
    def merges_total_counts(self) -> None:
        if self.state is not None:
            assert self.state.merges_total == self.restored_merges + self.merges_since_restore
            assert self.state.restored_from_merges == self.restored_from
            assert self.state.checkpoint_due() == self._checkpoint_due()

    @invariant()
    def params_finite_when_validated(self) -> None:
        if self.state is not None and self.policy.validate_uploads:
            assert self.state.params_all_finite()

    @invariant()
    def nothing_accepted_is_lost(self) -> None:
        """Exactly the model's pending uploads (same objects) are in the state's rounds; no rejected one."""
        if self.state is None:
            return
        assert set(self.state.rounds) == set(self.rounds)
        for p, rnd in self.rounds.items():
            live = self.state.rounds[p]
            assert list(live.contributions) == list(rnd.contribs)
            assert all(live.contributions[lid] is sub.contribution for lid, sub in rnd.contribs.items())
            assert (live.base_version, live.opened_at, live.quorum_at) == (
                rnd.base_version,
                rnd.opened_at,
                rnd.quorum_at,
            )
            assert live.base_version == self.versions[p]
        pending = {id(s.contribution) for s in self.subs if s.status == "pending"}
        live_ids = {id(c) for r in self.state.rounds.values() for c in r.contributions.values()}
        assert pending == live_ids
        rejected = {id(s.contribution) for s in self.subs if s.status == "rejected"}
        assert not rejected & live_ids

    @invariant()
    def duplicate_memory(self) -> None:
        if self.state is not None:
            assert self.state.merged_keys == self.merged_keys

    @invariant()
    def membership_and_budget(self) -> None:
        if self.state is None:
            return
        got = {
            lid: (r.incarnation, r.incarnation_index, r.last_seen, r.left)
            for lid, r in self.state.learners.items()
        }
        want = {lid: (r.incarnation, r.index, r.last_seen, r.left) for lid, r in self.learners.items()}
        assert got == want
        assert self.state.incarnation_counts == self.counts
        assert self.state.tokens_by_incarnation == self.tokens and self.state.stopped == self.stopped
        assert len(self.state.active_learners(self.now)) == self._active_count()

    @invariant()
    def merge_timing(self) -> None:
        """Due rounds match the model, and the grace window never holds a quorate round past its cap."""
        if self.state is None:
            return
        assert self.state.timing == self.timing
        due = self.state.due_merges(self.now)
        assert due == self._due()
        times = [t for p in self.rounds if (t := self._merge_time(p)) is not None]
        assert self.state.next_deadline(self.now) == (min(times) if times else None)
        cap = GRACE_CAP_STEPS * self.timing.t_step.get() if self.policy.algorithm.grace else 0.0
        for p, rnd in self.state.rounds.items():
            quorate = rnd.quorum_at is not None and len(rnd.contributions) >= self.policy.algorithm.min_quorum
            if self.state.stopped or (quorate and rnd.quorum_at is not None and self.now >= rnd.quorum_at + cap):
                assert p in due, f"fragment {p} should merge by now"
            if p in due and not self.state.stopped:
                assert quorate, f"fragment {p} due without quorum"
            if quorate and p not in due:
                event("a quorate round waits in its grace window")


SyncerMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSyncer = SyncerMachine.TestCase
