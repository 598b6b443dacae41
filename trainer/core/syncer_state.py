"""The syncer as a state machine: membership, merge rounds, versions, token budget.

No I/O and no clock: every method that depends on time takes ``now``. The gRPC
service (:mod:`trainer.syncer`) holds one :class:`SyncerState` behind a lock
and calls :meth:`SyncerState.due_merges` / :meth:`SyncerState.merge` when
:meth:`SyncerState.next_deadline` passes.

Rounds (``rounds="clock"``, the decoupled default; see :mod:`trainer.core.rounds`):

- round r of fragment p opens when the syncer's step clock reaches
  offset(p) + r·H; an upload names its round. The fragment's pending round
  merges **exactly once**: quorum K, then the grace window counted from the
  round's opening (never before it opens), one weighted merge of everything
  that arrived, one outer step, one new version. A round nobody uploaded to
  takes no step and leaves the momentum alone;
- every contribution is anchored at the value its round started from: a
  contribution ``Θ_p(base) − θ_p`` against an older base is rebased,
  ``Θ_p(start) − θ_p = Θ_p(start) − Θ_p(base) + upload`` (the syncer keeps
  the values of the last ``max_staleness`` versions for that). Since the
  pending round is the only way a fragment changes, its start value is the
  fragment's current value;
- an upload for a round that has already merged is *late*: refused
  (``late_round``, ``late_uploads="refuse"``: "a late fragment simply misses
  that merge") or carried into the fragment's next round, anchored there
  (``late_uploads="carry"``). A late upload never opens a round: the round it
  is carried into still merges no earlier than its scheduled opening.
  Contributions of a round that never reached quorum stay in the pending
  round as the next rounds open; a learner's newer contribution replaces its
  older one;
- an upload more than one round ahead of the syncer's clock is refused
  (``future_round``).

``rounds="arrival"`` is the earlier behaviour, kept as a negative control:
learners sync on their own step counts, the first upload after a merge opens
a round, and ``outer_gradient`` says whether late groups are rebased. The
synchronous modes use it too: with K = M every round gathers everyone, so
each round is one merge.

Version rules, per fragment p with current version v_p:

- a contribution's base is the version the learner last received; it is
  accepted while ``v_p − max_staleness <= base <= v_p`` (and, where it is
  rebased, while the syncer still holds that version's value — not after a
  restore); older is ``stale_version`` (the learner fetches the current
  fragment), newer was never handed out (``future_version``);
- the same (learner, incarnation, fragment, base, round) twice is a
  duplicate: the second is acknowledged and changes nothing (on the clock a
  learner that never received a round's result uploads again from the same
  base for the next round: anchored at that round's start, it is a new
  update; in arrival mode the round is always 0, so a cumulative re-upload
  from one base is merged once);
- a merge increments v_p by one; a syncer restored from a checkpoint skips
  every version ahead by the checkpoint interval, so versions never go
  backwards even though up to one interval of merges was lost. For that
  bound to hold the shell checkpoints whenever :meth:`SyncerState.checkpoint_due`
  says so: at start, right after a restore (a second crash must not restore
  the same versions again), and after every interval of merges;
- the keys of merged contributions are checkpointed too, so a learner that
  retries an upload whose ack a crash swallowed gets "duplicate", not a
  second merge of an update the restored model already holds. So are the
  step clock and each fragment's last merged round: a restored syncer's
  clock runs on from where it was, and a merged round stays merged.

Example (one learner, one fragment, K = 1):
    >>> import numpy as np
    >>> from trainer.core.fragments import partition_tensors
    >>> params = {"w": np.zeros(2, np.float32)}
    >>> from trainer.core.algorithm import Algorithm
    >>> algorithm = Algorithm(num_learners=1, num_fragments=1, sync_every=4, outer_lr=1.0, outer_momentum=0.0)
    >>> st = SyncerState.create(SyncerPolicy(algorithm), partition_tensors({"w": 2}, 1), params)
    >>> _ = st.join("a", "inc-1", now=0.0)
    >>> _ = st.report("a", "inc-1", step=2, tokens=128, step_time_s=0.25, now=0.0)  # starts the clock
    >>> round(st.cluster_step(now=1.0), 6)                                 # round 0 of fragment 0 opens at step 4
    4.0
    >>> st.submit(Contribution("a", "inc-1", 0, 0, {"w": -np.ones(2, np.float32)}, 4, 256, round=0), now=1.0).accepted
    True
    >>> st.due_merges(now=1.0)
    [0]
    >>> rec = st.merge(0, now=1.0)
    >>> st.versions, [round(x, 6) for x in st.params["w"].tolist()], rec.round
    ([1], [1.0, 1.0], 0)

Why one module: it is one state machine. Membership, the step clock, the budget, uploads, merging and
checkpoints read and write the same fields under the shell's one lock, and every refusal must leave all of them
unchanged; its policy, records, upload checks and checkpoint format live apart (:mod:`trainer.core.syncer_policy`,
:mod:`trainer.core.syncer_records`, :mod:`trainer.core.upload_checks`, :mod:`trainer.core.checkpoint_meta`,
:mod:`trainer.core.checkpoint_codec`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trainer.core import claims
from trainer.core.algorithm import Algorithm
from trainer.core.audit import MergeAudit, digest, optimizer_leaves
from trainer.core.checkpoint_codec import decode_opt_state, decode_params, encode_arrays
from trainer.core.checkpoint_meta import CheckpointMeta, Key
from trainer.core.drift import MergeMedian, Taking, after_merge, check_drift, drift_bound, drift_of, kept_history
from trainer.core.ema import Ema
from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.fragments import Fragment
from trainer.core.grace import Timing, merge_time, waited_for
from trainer.core.inflight import held_merge_time, hold_seconds
from trainer.core.merge import fragment_norm, merge_fragment, merge_rule_label, token_weight
from trainer.core.outer import outer_step
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.rounds import StepClock, cluster_pace, round_at, round_opens
from trainer.core.syncer_policy import STEP_SLACK, SyncerPolicy
from trainer.core.syncer_records import (
    Contribution,
    JoinResult,
    LearnerRecord,
    MergeRecord,
    Participant,
    Round,
    SubmitResult,
    Tensors,
    tensor_specs,
)
from trainer.core.token_allowance import Allowance
from trainer.core.upload_checks import (
    check_base,
    check_finite,
    check_layout,
    check_norm,
    check_round,
    per_step_norm,
)


@dataclass
class SyncerState:
    """The syncer's whole state. Mutated only through its methods."""

    policy: SyncerPolicy
    fragments: tuple[Fragment, ...]
    params: Tensors
    versions: list[int]
    opt_states: list[Any]
    learners: dict[str, LearnerRecord] = field(default_factory=dict)
    incarnation_counts: dict[str, int] = field(default_factory=dict)
    tokens_by_incarnation: dict[str, int] = field(default_factory=dict)  # "learner/incarnation" -> tokens
    # Per learner id, over its incarnations: the steps time allows it so far (not checkpointed: a restored
    # syncer starts each id's allowance afresh at its join).
    allowances: dict[str, Allowance] = field(default_factory=dict)
    rounds: dict[int, Round] = field(default_factory=dict)  # fragment -> its pending round
    merged_keys: set[Key] = field(default_factory=set)
    last_merge_at: list[float | None] = field(default_factory=list)
    # Per fragment: each learner's latest merged norm per step (the outlier guard's reference: one value each).
    merged_norms: list[dict[str, float]] = field(default_factory=list)
    merges_total: int = 0
    rejections: Counter = field(default_factory=Counter)
    timing: Timing = field(default_factory=Timing)
    stopped: bool = False  # the budget is reached and any settle phase is over: learners are told to stop
    restored_from_merges: int = -1
    saved_at_merges: int | None = (
        None  # merges_total at the last checkpoint taken (None: none since start/restore)
    )
    # Rebasing: (fragment, version) -> that version's value, for the last max_staleness versions.
    # Not checkpointed: after a restore only the current versions are held (older bases are refused as stale).
    past_values: dict[tuple[int, int], Tensors] = field(default_factory=dict)
    clock: StepClock = field(default_factory=StepClock)
    # Per learner id: its last reported step time, kept while it is away (its slot in the pace).
    step_times: dict[str, float] = field(default_factory=dict)
    # Per learner id: the moving average of its uploads' durations; the window's t_upload is their median, so one
    # learner's slow uploads do not stretch every round's hold (invariant round).
    upload_times: dict[str, Ema] = field(default_factory=dict)
    made_at: dict[tuple[int, int], float] = field(
        default_factory=dict
    )  # (fragment, version) -> when it was merged
    last_round: list[int] = field(default_factory=list)  # per fragment: the last round merged (-1: none)
    late_carried: int = 0
    budget_reached_at: float | None = None  # when tokens_total first reached the budget (not checkpointed)
    # Uploads whose header was accepted and whose body is in flight (rounds="clock"): key -> when the header came.
    # A round waits a bounded hold for those announced by its merge time (trainer.core.inflight). Not
    # checkpointed: a restarted syncer's in-flight calls died with it.
    announced: dict[Key, float] = field(default_factory=dict)
    # Per fragment, per learner id: its pull on the merges (from their medians), summed over about drift_window
    # merges (trainer.core.drift, invariant drift). Not checkpointed: a restored syncer sums afresh.
    drift: dict[int, dict[str, dict[str, np.ndarray]]] = field(default_factory=dict)
    # Per fragment: the medians of its measured merges since the oldest base an upload may have (a late upload's
    # reference: what the others did per step over the rounds it trained through). Not checkpointed either.
    drift_medians: dict[int, list[MergeMedian]] = field(default_factory=dict)

    # ---- construction -------------------------------------------------
    @classmethod
    def create(
        cls, policy: SyncerPolicy, fragments: tuple[Fragment, ...], params: Mapping[str, np.ndarray]
    ) -> SyncerState:
        names = {n for f in fragments for n in f.names}
        if names != set(params):
            raise ValueError(f"fragments cover {sorted(names ^ set(params))} differently from the parameters")
        if len(fragments) != policy.algorithm.num_fragments:
            raise ValueError(f"{len(fragments)} fragments, but the algorithm has {policy.algorithm.num_fragments}")
        p = {n: np.array(v, copy=True) for n, v in params.items()}
        opt = policy.optimizer
        a = policy.ema_alpha
        st = cls(
            policy=policy,
            fragments=fragments,
            params=p,
            versions=[0] * len(fragments),
            opt_states=[opt.init(cls._frag(p, f)) for f in fragments],
            last_merge_at=[None] * len(fragments),
            merged_norms=[{} for _ in fragments],
            timing=Timing.with_alpha(a),
            last_round=[-1] * len(fragments),
        )
        for fragment in range(len(fragments)):
            st._remember(fragment)
        return st

    @property
    def algorithm(self) -> Algorithm:
        return self.policy.algorithm

    def start_at_version(self, version: int) -> None:
        """A fresh state whose versions start at ``version`` (a syncer told to start fresh over checkpoints it could
        not restore: every version it serves must be above theirs)."""
        self.versions = [version] * len(self.versions)
        self.past_values = {}
        for fragment in range(len(self.fragments)):
            self._remember(fragment)

    def _remember(self, fragment: int) -> None:
        """Keep the fragment's current value for rebasing contributions against older bases."""
        if not self.algorithm.rebases:
            return
        v = self.versions[fragment]
        self.past_values[(fragment, v)] = {n: self.params[n].copy() for n in self.fragments[fragment].names}
        for key in [k for k in self.past_values if k[0] == fragment and k[1] < v - self.algorithm.max_staleness]:
            del self.past_values[key]

    def _rebased(self, c: Contribution, glob: Tensors) -> Tensors:
        """The contribution as an outer gradient against the fragment's current value."""
        if not self.algorithm.rebases or c.base_version == self.versions[c.fragment]:
            return c.tensors
        base = self.past_values[(c.fragment, c.base_version)]
        return {n: t + (glob[n] - base[n]) for n, t in c.tensors.items()}

    def _anchor(self, c: Contribution) -> Tensors | None:
        """The value a contribution was rebased from (its base version's), or None if it was not rebased."""
        if not self.algorithm.rebases or c.base_version == self.versions[c.fragment]:
            return None
        return self.past_values[(c.fragment, c.base_version)]

    @staticmethod
    def _frag(params: Tensors, fragment: Fragment) -> Tensors:
        return {n: params[n] for n in fragment.names}

    @property
    def optimizer(self):
        return self.policy.optimizer

    # ---- membership ----------------------------------------------------
    def join(self, learner_id: str, incarnation: str, now: float) -> JoinResult:
        claims.check_name("learner_id", learner_id)
        claims.check_name("incarnation", incarnation)
        rec = self.learners.get(learner_id)
        if rec is not None and rec.incarnation == incarnation and not rec.left:
            rec.last_seen = now  # idempotent re-join of the same process
            return JoinResult(rec.incarnation_index, tuple(self.versions), True, self.clock_reading(now))
        if rec is not None and self.policy.planted_bug == "forget_rejoined":
            rec.last_seen = now  # PLANTED BUG (off unless a test enables it): the new incarnation is not recorded
            return JoinResult(rec.incarnation_index, tuple(self.versions), True, self.clock_reading(now))
        index = self.incarnation_counts.get(learner_id, 0)
        self.incarnation_counts[learner_id] = index + 1
        self.learners[learner_id] = LearnerRecord(learner_id, incarnation, index, now, now)
        if learner_id not in self.allowances:
            self.allowances[learner_id] = Allowance.starting(now, STEP_SLACK + self.algorithm.overlap_floor)
        return JoinResult(index, tuple(self.versions), rec is not None or index > 0, self.clock_reading(now))

    def leave(self, learner_id: str, incarnation: str, now: float) -> None:
        rec = self._member(learner_id, incarnation, now)
        rec.left = True

    def _member(self, learner_id: str, incarnation: str, now: float, touch: bool = True) -> LearnerRecord:
        """The learner's record if this incarnation is a member; ``touch``: the message is accepted, so the learner
        is alive now. An upload's header checks membership without touching (a refused upload is no sign of life:
        a learner whose every upload is refused must not hold rounds and the settle phase waiting for it)."""
        rec = self.learners.get(learner_id)
        if rec is None:
            raise Rejected(RejectReason.UNKNOWN_LEARNER, f"learner {learner_id!r} has not joined; call Join first")
        if rec.incarnation != incarnation:
            raise Rejected(
                RejectReason.STALE_INCARNATION,
                f"learner {learner_id!r} incarnation {incarnation!r} was replaced by {rec.incarnation!r}",
            )
        if rec.left:
            raise Rejected(
                RejectReason.LEFT_LEARNER, f"learner {learner_id!r} has left; join again with a new incarnation"
            )
        if touch:
            self._touch(rec, now)
        return rec

    def _touch(self, rec: LearnerRecord, now: float, heard_at: float | None = None) -> None:
        """The learner is alive at ``now``; ``heard_at``: when it was last heard before this message, where its
        record no longer says (the body evidence of the upload being accepted)."""
        before = rec.heard_at() if heard_at is None else max(heard_at, rec.heard_at())
        if now - before > self.policy.liveness_timeout_s:
            rec.merged_since_back = False  # it was away (partitioned, paused ...): back once merged again
        rec.last_seen = now

    def active_learners(self, now: float) -> list[LearnerRecord]:
        return [r for r in self.learners.values() if r.active(now, self.policy.liveness_timeout_s)]

    # ---- the step clock (rounds="clock") ---------------------------------
    def cluster_step(self, now: float) -> float:
        return self.clock.step_at(now)

    def clock_reading(self, now: float) -> tuple[float, float]:
        """(cluster step, pace): what every reply tells the learners, so that they sync on the syncer's fragment schedule."""
        return self.clock.step_at(now), self.clock.pace_s

    @functools.cached_property
    def fragment_schedule(self) -> FragmentSchedule:
        """The fragment schedule, built once: the policy and the fragments never change."""
        return self.algorithm.fragment_schedule()

    def current_round(self, fragment: int, now: float) -> int:
        return round_at(self.fragment_schedule, fragment, self.clock.step_at(now))

    def _opens_at(self, fragment: int, r: int, now: float) -> float:
        t = self.clock.time_of(round_opens(self.fragment_schedule, fragment, r))
        return now if t is None else t

    def _repace(self, now: float) -> None:
        """Follow the cluster's pace (:meth:`pace`); the clock starts once it has one."""
        pace = self.pace(now)
        if pace is not None and pace != self.clock.pace_s:
            self.clock = self.clock.repaced(now, pace)

    # ---- reports and budget -------------------------------------------
    def progress(self) -> float:
        """The fraction of the token budget trained so far (0 without a budget): learners decay their inner lr
        by it, and it is in every reply that carries it."""
        budget = self.policy.token_budget
        return min(self.tokens_total / budget, 1.0) if budget else 0.0

    @property
    def tokens_total(self) -> int:
        return sum(self.tokens_by_incarnation.values())

    def pace(self, now: float) -> float | None:
        """The cluster's pace, for the clock and for bounding claims: the lower median over the M configured slots
        (:func:`cluster_pace`) of each learner's last reported step time, kept while the learner is away. Until
        half the slots have a value, a provisional one: the lower median of those reported (the first reporter
        starts the clock; docs/security.md says what that leaves open)."""
        values = self.step_times.values()
        return cluster_pace(values, self.algorithm.num_learners) or cluster_pace(values)

    def steps_possible(self, since: float, now: float) -> int | None:
        """The most steps a learner can have taken since ``since`` (None: the cluster has no pace yet)."""
        return claims.steps_possible(
            now - since, self.pace(now), self.policy.max_speedup, STEP_SLACK + self.algorithm.overlap_floor
        )

    def report(
        self, learner_id: str, incarnation: str, step: int, tokens: int, step_time_s: float, now: float
    ) -> bool:
        """Record a learner's progress; returns True when the learner should stop (budget reached).

        Counted toward the budget: the claimed tokens, but no more than the steps time allows the learner id since
        it first joined, over all its incarnations (trainer.core.token_allowance); a cumulative count capped now is
        counted later.
        """
        claims.check_count("step", step)
        claims.check_count("tokens", tokens)
        claims.check_step_time(step_time_s)
        claims.check_tokens(step, tokens, self.policy.tokens_per_step, "report")
        rec = self._member(learner_id, incarnation, now)
        rec.step, rec.tokens = step, tokens
        self._accrue(now)  # every id's allowance, at the pace until this report changes it
        if step_time_s > 0:
            self.step_times[learner_id] = float(step_time_s)
            if self.algorithm.clocked:
                self._repace(now)
                if self.clock.started:  # (before half the learners have reported there is no pace to average)
                    self.timing = self.timing.observe_step(self.clock.pace_s)
            else:
                self.timing = self.timing.observe_step(step_time_s)
        key = f"{learner_id}/{incarnation}"
        counted = self.tokens_by_incarnation.get(key, 0)
        if tokens > counted:
            per = self.policy.tokens_per_step  # 0: tokens per step unknown, the claim is all there is
            bounded = bool(per) and self.policy.max_speedup > 0  # with no pace yet: the slack alone
            allowance, grown = self.allowances[learner_id].counting(tokens - counted, per, bounded)
            self.allowances[learner_id] = allowance
            counted += grown
        self.tokens_by_incarnation[key] = counted
        if self.policy.token_budget and self.tokens_total >= self.policy.token_budget:
            if self.budget_reached_at is None:
                self.budget_reached_at = now
            if self.policy.settle_s <= 0:
                self.stopped = True  # else the shell's tick decides when the settle phase ends (settle)
        return self.stopped

    @property
    def budget_reached(self) -> bool:
        """The run's result is fixed: final eval and checkpoint now (training may go on settling)."""
        return self.stopped or self.budget_reached_at is not None

    def _accrue(self, now: float) -> None:
        """Every learner id's allowance (:mod:`trainer.core.token_allowance`) accrued to ``now`` at the pace now."""
        pace = self.pace(now)
        for lid, a in self.allowances.items():
            self.allowances[lid] = a.accrued(now, pace, self.policy.max_speedup)

    def awaited(self, now: float) -> list[str]:
        """Learners the syncer has seen (this incarnation or a checkpointed one) that are away, or back but not
        merged since (a new incarnation, or a return after more than the liveness timeout without a word)."""
        timeout = self.policy.liveness_timeout_s
        out = []
        for lid in sorted(set(self.incarnation_counts) | set(self.learners)):
            rec = self.learners.get(lid)
            if rec is None or not rec.active(now, timeout) or not rec.merged_since_back:
                out.append(lid)
        return out

    def settle(self, now: float) -> bool:
        """After the budget: stop once nobody is awaited or ``settle_s`` has passed; True when this call stopped it.

        Shells call it on every tick, after the budget's final eval: it can end only at a merge (the last awaited
        learner merged again) or at its deadline, which :meth:`next_deadline` includes.
        """
        if self.stopped or self.budget_reached_at is None:
            return False
        # The same sum as next_deadline's: `now - start >= settle_s` can round below at now == the deadline, and a
        # shell woken at its deadline would then wake again at once, forever (found by the simulator's search).
        if now >= self.budget_reached_at + self.policy.settle_s or not self.awaited(now):
            self.stopped = True
            return True
        return False

    # ---- uploads -------------------------------------------------------
    def check_header(
        self,
        learner_id: str,
        incarnation: str,
        fragment: int,
        base_version: int,
        specs: Mapping[str, tuple[tuple[int, ...], str]],
        c_steps: int,
        c_tokens: int,
        now: float,
        round: int = 0,
    ) -> int:
        """Validate an upload before its data arrives; returns the current version.

        Raises :class:`Rejected` naming what is wrong. Duplicate (already
        accepted) uploads pass: :meth:`submit` acknowledges them.
        """
        if self.stopped:
            raise Rejected(RejectReason.FINISHED, "the token budget is reached; no more uploads are merged")
        # Every field is checked before the learner's record is touched: a refused upload changes nothing.
        claims.check_count("c_steps", c_steps)
        claims.check_count("c_tokens", c_tokens)
        claims.check_tokens(c_steps, c_tokens, self.policy.tokens_per_step, "upload")
        if base_version < 0:
            raise Rejected(
                RejectReason.FUTURE_VERSION, f"base version {base_version} was never issued (versions start at 0)"
            )
        if not 0 <= fragment < len(self.fragments):
            raise Rejected(
                RejectReason.UNKNOWN_FRAGMENT, f"fragment {fragment} not in 0..{len(self.fragments) - 1}"
            )
        self._member(learner_id, incarnation, now, touch=False)  # submit() touches it once the upload is accepted
        current = self.versions[fragment]
        round = round if self.algorithm.clocked else 0  # arrival rounds are not the learner's to name
        key = (learner_id, incarnation, fragment, base_version, round)
        if key in self.merged_keys or self._pending(key):
            return current
        a = self.algorithm
        if a.clocked:
            check_round(
                fragment, round, self.current_round(fragment, now), self.last_round[fragment], a.late_uploads
            )
        held = (fragment, base_version) in self.past_values
        check_base(fragment, base_version, current, a.max_staleness, a.rebases, held)
        frag = {n: self.params[n] for n in self.fragments[fragment].names}
        check_layout(fragment, specs, tensor_specs(frag, a.wire_format))
        if self.policy.validate_uploads and self.policy.drift_k > 0:
            p = self.policy
            check_drift(
                fragment, learner_id, self.drift_of(fragment, learner_id), drift_bound(p.drift_k, p.drift_window)
            )
        return current

    def drift_of(self, fragment: int, learner_id: str) -> float:
        """How far ``learner_id`` has pulled ``fragment``'s merges from their medians lately (lr per step, summed)."""
        return drift_of(self.drift.get(fragment, {}).get(learner_id))

    def announce(
        self,
        learner_id: str,
        incarnation: str,
        fragment: int,
        base_version: int,
        specs: Mapping[str, tuple[tuple[int, ...], str]],
        c_steps: int,
        c_tokens: int,
        now: float,
        round: int = 0,
    ) -> int:
        """An upload's header arrived: check it (:meth:`check_header`, raises :class:`Rejected`) and, on the clock,
        count it as made: its round's merge waits a bounded hold for its body (:mod:`trainer.core.inflight`).
        The shell calls :meth:`submit` with the body, or :meth:`withdraw` if the body never comes. Returns the
        fragment's current version."""
        current = self.check_header(
            learner_id, incarnation, fragment, base_version, specs, c_steps, c_tokens, now, round
        )
        key = (learner_id, incarnation, fragment, base_version, round)
        if key not in self.merged_keys and not self._pending(key):
            self.learners[learner_id].bodies[key] = now  # its bytes show the learner alive while they come
            if self.algorithm.clocked:
                self.announced[key] = now
        return current

    def hear_body(self, key: Key, now: float) -> None:
        """Bytes of an announced upload's body arrived: its learner is alive (:meth:`LearnerRecord.heard_at`)."""
        rec = self.learners.get(key[0])
        if rec is not None and key in rec.bodies:
            rec.bodies[key] = now

    def withdraw(self, key: Key) -> float | None:
        """The body of an announced upload will not come (its call failed or was refused): stop waiting for it, and
        its bytes stop counting as a sign of life. Returns when they last arrived (None: not announced)."""
        self.announced.pop(key, None)
        rec = self.learners.get(key[0])
        return rec.bodies.pop(key, None) if rec is not None else None

    def _in_flight(self, rnd: Round) -> list[Key]:
        """The announced uploads still in flight for ``rnd`` (made for its round or an earlier one)."""
        return [k for k in self.announced if k[2] == rnd.fragment and k[4] <= rnd.round]

    def _pending(self, key: Key) -> bool:
        rnd = self.rounds.get(key[2])
        c = rnd.contributions.get(key[0]) if rnd is not None else None
        return c is not None and c.key == key

    def submit(self, c: Contribution, now: float) -> SubmitResult:
        """Add a contribution to its fragment's round (or acknowledge a duplicate)."""
        if not self.algorithm.clocked and c.round:
            c = dataclasses.replace(
                c, round=0
            )  # arrival mode: an update is (learner, incarnation, fragment, base)
        specs = tensor_specs(c.tensors, self.algorithm.wire_format)  # decoded from the run's wire format
        current = self.check_header(
            c.learner_id, c.incarnation, c.fragment, c.base_version, specs, c.c_steps, c.c_tokens, now, c.round
        )
        if c.key in self.merged_keys or self._pending(c.key):
            self._touch(self.learners[c.learner_id], now)
            return SubmitResult(True, current, duplicate=True)
        body_heard = self.withdraw(c.key)  # its body is here (if it is refused below, nobody waits for it either)
        c = self._bounded(c, now)
        if self.policy.validate_uploads:
            check_finite(c.fragment, c.tensors)
            p = self.policy
            check_norm(
                c.fragment,
                c.tensors,
                c.c_steps,
                self._frag(self.params, self.fragments[c.fragment]),
                p.inner_lr,
                p.inner_weight_decay,
                self.merged_norms[c.fragment],
                self.algorithm.num_learners,
                p.max_norm_ratio,
                p.coordinate_step_bound,
            )
        self._touch(self.learners[c.learner_id], now, body_heard)
        rnd = self.rounds.get(c.fragment)
        late = False
        if self.algorithm.clocked:
            late = c.round <= self.last_round[c.fragment]  # carried: refused ones never get here
            target = max(c.round, self.last_round[c.fragment] + 1)
            if rnd is None:
                rnd = self.rounds[c.fragment] = Round(
                    c.fragment, current, self._opens_at(c.fragment, target, now), target
                )
            elif target > rnd.round:  # the pending round never merged: its contributions carry on into this one
                rnd.eligible_at = rnd.eligible_since(now)  # (with its quorum in, it was due: the audit times that)
                rnd.round, rnd.opened_at = target, self._opens_at(c.fragment, target, now)
            if late:
                rnd.late += 1
                self.late_carried += 1
        elif rnd is None:
            rnd = self.rounds[c.fragment] = Round(c.fragment, current, opened_at=now, round=c.round)
        rnd.contributions[c.learner_id] = (
            c  # a learner's newer contribution (or incarnation's) replaces its older one
        )
        rnd.arrived_at[c.learner_id] = now
        if rnd.quorum_at is None and len(rnd.contributions) >= self.algorithm.min_quorum:
            rnd.quorum_at = now
            self.timing = self.timing.observe_quorum(max(now - rnd.opened_at, 0.0))
        self._observe_upload(c, now)
        return SubmitResult(True, current, late=late)

    def _observe_upload(self, c: Contribution, now: float) -> None:
        """An accepted upload's duration: the hold's t_upload is the median over learners of each one's moving
        average, one value each, so one learner's slow uploads do not stretch every round's hold."""
        if c.upload_seconds > 0:
            lid = c.learner_id
            self.upload_times[lid] = self.upload_times.get(lid, Ema(self.policy.ema_alpha)).update(
                c.upload_seconds
            )
            median = statistics.median_low([e.get() for e in self.upload_times.values()])
            self.timing = replace(self.timing, t_upload=replace(self.timing.t_upload, value=median))

    def waited_for(self, rnd: Round, now: float) -> int | None:
        """How many learners ``rnd`` waits for with ``grace_waits_for: heard`` (None: every active one)."""
        if self.algorithm.grace_waits_for != "heard":
            return None
        active = [(r.learner_id, r.heard_at()) for r in self.active_learners(now)]
        return waited_for(active, rnd.contributions, now, self.policy.heard_within_s)

    def _bounded(self, c: Contribution, now: float) -> Contribution:
        """The contribution with its step count capped by the time since it could have started (claims)."""
        rec = self.learners[c.learner_id]
        since = max(self.made_at.get((c.fragment, c.base_version), rec.joined_at), rec.joined_at)
        possible = self.steps_possible(since, now)
        if possible is None or c.c_steps <= possible:
            return c
        per = self.policy.tokens_per_step
        return dataclasses.replace(c, c_steps=possible, c_tokens=possible * per if per else c.c_tokens)

    # ---- merging -------------------------------------------------------
    def merge_at(self, fragment: int, now: float) -> float | None:
        """When the round of ``fragment`` should merge (None: not yet decidable): quorum and grace, then (on the
        clock) the bodies of uploads announced by then, each for at most a hold (:mod:`trainer.core.inflight`)."""
        rnd = self.rounds.get(fragment)
        if rnd is None or not rnd.contributions:
            return None
        if self.stopped:
            return min(rnd.opened_at, now)  # flush whatever arrived before the budget was reached
        t = self._unheld_merge_at(rnd, now)
        if t is None or not self.algorithm.clocked:
            return t
        return held_merge_time(t, [self.announced[k] for k in self._in_flight(rnd)], self.hold_s)

    def _unheld_merge_at(self, rnd: Round, now: float) -> float | None:
        return merge_time(
            self.algorithm.quorum,
            self.timing,
            rnd.quorum_at,
            len(rnd.contributions),
            n if (n := self.waited_for(rnd, now)) is not None else len(self.active_learners(now)),
            rnd.opened_at if self.algorithm.clocked else None,
        )

    @property
    def hold_s(self) -> float:
        """How long a round waits for an announced upload's body."""
        return hold_seconds(self.timing.t_upload.get(), self.timing.t_step.get())

    def due_merges(self, now: float) -> list[int]:
        return sorted(p for p in self.rounds if (t := self.merge_at(p, now)) is not None and t <= now)

    def next_deadline(self, now: float) -> float | None:
        times = [t for p in self.rounds if (t := self.merge_at(p, now)) is not None]
        if self.budget_reached_at is not None and not self.stopped:
            times.append(self.budget_reached_at + self.policy.settle_s)  # the settle phase's end at the latest
        return min(times) if times else None

    def warm_up(self) -> None:
        """Compile every fragment's outer step now, before any round is due: compiled at a fragment's first merge, it
        held the driver ~0.45 s per fragment on a busy 2-core machine and ~3 s once in CI's containers, so the
        first rounds merged late (the merge audit's lag bound). Nothing is changed: the step's result is dropped."""
        for p, frag in enumerate(self.fragments):
            glob = self._frag(self.params, frag)
            zero = {n: np.zeros_like(v) for n, v in glob.items()}
            outer_step(self.optimizer, self.opt_states[p], glob, zero, self.policy.step_scale(self.tokens_total))

    def merge(self, fragment: int, now: float) -> MergeRecord:
        """Merge the pending round of ``fragment``: weights, outer gradient, one outer step, version + 1."""
        rnd = self.rounds.pop(fragment)
        t = self.timing
        decision = (
            len(rnd.contributions),
            len(self.active_learners(now)),
            (t.t_step.get(), t.t_quorum.get(), t.t_upload.get(), t.t_merge.get(), t.t_broadcast.get()),
            self.waited_for(rnd, now),
        )
        # Bodies that came after quorum + grace made the round only because their headers had (the hold).
        unheld = self._unheld_merge_at(rnd, now) if self.algorithm.clocked and not self.stopped else None
        waited = [] if unheld is None else [t for t in rnd.arrived_at.values() if t > unheld]
        held_s = max(waited) - unheld if waited and unheld is not None else 0.0
        # Bodies announced for this round or an earlier one that are still out missed it: nobody waits for them now.
        for key in self._in_flight(rnd):
            del self.announced[key]
        frag = self.fragments[fragment]
        glob = self._frag(self.params, frag)
        contribs = list(rnd.contributions.values())
        vectors = [self._rebased(c, glob) for c in contribs]
        anchors, start = tuple(self._anchor(c) for c in contribs), self.versions[fragment]
        weights = [token_weight(c.c_tokens, c.c_steps, self.algorithm.weighting) for c in contribs]
        rule = merge_rule_label(frag.names, self.algorithm.merge_rule, self.policy.mean_tensors)
        delta = merge_fragment(vectors, weights, self.algorithm.merge_rule, self.policy.mean_tensors)
        scale = self.policy.step_scale(self.tokens_total)
        opt_before = self.opt_states[fragment]
        new_frag, new_state = outer_step(self.optimizer, opt_before, glob, delta, scale)
        if self.policy.validate_uploads and not all(np.all(np.isfinite(t)) for t in new_frag.values()):
            # The round is dropped; parameters, versions and momentum stay as they were.
            raise FloatingPointError(f"merge of fragment {fragment} produced non-finite parameters; refusing it")
        self.opt_states[fragment] = new_state
        self.params.update(new_frag)
        self.versions[fragment] += 1
        if self.algorithm.clocked:
            self.last_round[fragment] = rnd.round
        self._remember(fragment)
        self.last_merge_at[fragment] = now
        v = self.versions[fragment]
        self.made_at[(fragment, v)] = now
        for stale in [k for k in self.made_at if k[0] == fragment and k[1] < v - self.algorithm.max_staleness]:
            del self.made_at[stale]
        self.merged_norms[fragment].update({c.learner_id: per_step_norm(c.tensors, c.c_steps) for c in contribs})
        self.merges_total += 1
        total_w = sum(weights) or float(len(weights))
        shares = [w / total_w if sum(weights) else 1 / len(weights) for w in weights]
        if self.policy.validate_uploads:  # the learner's own update, not rebased: what it trained
            self.drift[fragment], made = after_merge(
                self.drift.get(fragment, {}),
                [Taking(c.learner_id, c.tensors, c.c_steps, w, c.base_version) for c, w in zip(contribs, shares)],
                self.policy.inner_lr,
                self.policy.drift_window,
                v,
                self.drift_medians.get(fragment, ()),
            )
            self.drift_medians[fragment] = kept_history(
                self.drift_medians.get(fragment, ()), made, v - self.algorithm.max_staleness
            )
        participants = []
        for c, w in zip(contribs, shares):
            self.merged_keys.add(c.key)
            rec = self.learners.get(c.learner_id)
            if rec is not None and rec.incarnation == c.incarnation:
                rec.merged_contributions += 1
                rec.merged_since_back = True
            participants.append(
                Participant(
                    c.learner_id,
                    c.incarnation,
                    w,
                    c.c_steps,
                    c.c_tokens,
                    c.base_version,
                    c.round,
                    self.drift_of(fragment, c.learner_id),
                )
            )
        # Keys below the previous version can never be re-sent usefully: keep the set small.
        self.merged_keys = {
            k for k in self.merged_keys if k[3] >= self.versions[k[2]] - self.algorithm.max_staleness - 1
        }
        audit = MergeAudit(
            fragment,
            start,
            v,
            glob,
            tuple(c.tensors for c in contribs),
            anchors,
            optimizer_leaves(opt_before),
            optimizer_leaves(new_state),
            delta,
            new_frag,
            scale,
        )
        return MergeRecord(
            fragment,
            self.versions[fragment],
            rnd.base_version,
            tuple(participants),
            rule,
            rnd.opened_at,
            rnd.quorum_at,
            now,
            fragment_norm(delta),
            self.merges_total,
            rnd.round,
            rnd.late,
            len(waited),
            held_s,
            rnd.eligible_since(now),
            audit,
            None if self.stopped else decision,
        )

    def observe_merge_seconds(self, seconds: float) -> None:
        """The shell measured how long a merge took (part of t_sync)."""
        self.timing = self.timing.observe_merge(seconds)

    def observe_broadcast_seconds(self, seconds: float) -> None:
        """The shell measured how long sending a merged fragment to a learner took (part of t_sync)."""
        self.timing = self.timing.observe_broadcast(seconds)

    # ---- fragments out -------------------------------------------------
    def fragment_value(self, fragment: int) -> tuple[int, Tensors]:
        """The current version and a copy of the global value of one fragment."""
        frag = self.fragments[fragment]
        return self.versions[fragment], {n: self.params[n].copy() for n in frag.names}

    def fragment_digests(self) -> list[tuple[str, str]]:
        """Per fragment, the digests (trainer.core.audit) of its value and of its optimizer state."""
        return [
            (digest(self._frag(self.params, f)), digest(optimizer_leaves(self.opt_states[p])))
            for p, f in enumerate(self.fragments)
        ]

    def params_all_finite(self) -> bool:
        return all(np.all(np.isfinite(t)) for t in self.params.values())

    # ---- checkpoints ---------------------------------------------------
    def checkpoint_due(self) -> bool:
        """True when the shell must checkpoint now: none since start/restore, or an interval of merges since."""
        if self.saved_at_merges is None:
            return True
        return self.merges_total - self.saved_at_merges >= self.policy.checkpoint_every_merges

    def to_checkpoint(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Take a checkpoint: arrays and JSON-able metadata that :meth:`from_checkpoint` restores.

        Marks the state saved (see :meth:`checkpoint_due`); the shell writes the result durably.
        """
        self.saved_at_merges = self.merges_total
        return encode_arrays(self.params, self.opt_states), self._meta().to_json()

    def state_digest(self, version_skip: int = 0) -> str:
        """Digest of everything a checkpoint's metadata holds (versions less ``version_skip``): a restored syncer's,
        taken with the skip it applied, equals the checkpoint's — nothing left out of the restore (merge audit)."""
        return self._meta().digest(version_skip)

    def _meta(self) -> CheckpointMeta:
        return CheckpointMeta(
            versions=tuple(self.versions),
            merges_total=self.merges_total,
            incarnation_counts=dict(self.incarnation_counts),
            tokens_by_incarnation=dict(self.tokens_by_incarnation),
            stopped=self.stopped,
            merged_norms=tuple(dict(r) for r in self.merged_norms),
            merged_keys=frozenset(self.merged_keys),
            clock=(self.clock.anchor_time, self.clock.anchor_step, self.clock.pace_s),
            last_round=tuple(self.last_round),
            late_carried=self.late_carried,
        )

    @classmethod
    def from_checkpoint(
        cls,
        policy: SyncerPolicy,
        fragments: tuple[Fragment, ...],
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        version_skip: int,
    ) -> SyncerState:
        """Restore; every version jumps ahead by ``version_skip`` (the checkpoint interval)."""
        m = CheckpointMeta.from_json(meta, len(fragments))
        st = cls.create(policy, fragments, decode_params(arrays))
        st.opt_states = [decode_opt_state(arrays, p, template) for p, template in enumerate(st.opt_states)]
        st.versions = [v + version_skip for v in m.versions]
        st.past_values = {}
        for fragment in range(len(fragments)):
            st._remember(fragment)
        st.merges_total = m.merges_total
        st.restored_from_merges = st.merges_total
        st.incarnation_counts = dict(m.incarnation_counts)
        st.tokens_by_incarnation = dict(m.tokens_by_incarnation)
        st.stopped = m.stopped
        st.merged_keys = set(m.merged_keys)
        # The clock runs on from the checkpoint: rounds keep their times, and the syncer's downtime passes as steps.
        st.clock = StepClock(*m.clock)
        st.last_round = list(m.last_round)
        st.late_carried = m.late_carried
        if m.merged_norms is not None:
            st.merged_norms = [dict(r) for r in m.merged_norms]
        return st

    def copy_params(self) -> Tensors:
        return copy.deepcopy(self.params)
