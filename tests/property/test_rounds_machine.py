"""Hypothesis stateful test of rounds on the syncer's clock (``rounds="clock"``), pure core, virtual time.

Drives one :class:`SyncerState` through uploads for past, current and future rounds, clock advances and
merges, and checks after every step what the paper's round semantics promise:

- every (fragment, round) merges at most once, and never before the round opens;
- a fragment's version counts its merges exactly;
- a round nobody uploaded to takes no step: parameters and outer momentum stay as they were;
- a late upload (its round has merged) never opens a round: refused, it changes nothing; carried, it waits
  for the next round's opening;
- a learner never waits for a merge that excludes its own on-time upload: the version its reply tells it to
  wait for is made by a merge it takes part in (or one with its newer upload);
- an upload whose header made its round (announced by the round's merge time) is waited for: no round merges
  while such a body is in flight and within its hold (:mod:`trainer.core.inflight`); a refused header changes
  nothing.
"""

from __future__ import annotations

import jax
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.support import syncer_policy
from trainer.core.fragments import partition_tensors
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.replies import upload_outcome
from trainer.core.rounds import round_opens
from trainer.core.syncer_records import Contribution
from trainer.core.syncer_state import SyncerState

LEARNERS = ("a", "b", "c")
PACE = 0.25  # seconds per cluster step; H = 4, so a fragment's rounds are 1 s apart


class ClockRounds(RuleBasedStateMachine):
    @initialize(
        min_quorum=st.integers(1, 2),
        grace=st.booleans(),
        late=st.sampled_from(["refuse", "carry"]),
        momentum=st.sampled_from([0.0, 0.9]),
        fragments=st.integers(1, 2),
    )
    def setup(self, min_quorum: int, grace: bool, late: str, momentum: float, fragments: int) -> None:
        policy = syncer_policy(
            fragments,
            num_learners=len(LEARNERS),
            min_quorum=min_quorum,
            grace=grace,
            grace_cap_steps=1.6,
            outer_lr=0.7,
            outer_momentum=momentum,
            sync_every=4,
            late_uploads=late,
            max_staleness=len(LEARNERS),
            rounds="clock",
            liveness_timeout_s=1e9,
        )
        self.st = SyncerState.create(
            policy,
            partition_tensors({"w": 2, "v": 3}, fragments),
            {"w": np.zeros(2, np.float32), "v": np.zeros(3, np.float32)},
        )
        self.now = 0.0
        for lid in LEARNERS:
            self.st.join(lid, "i", now=0.0)
            self.st.report(lid, "i", step=2, tokens=128, step_time_s=PACE, now=0.0)
        self.held = {(lid, p): 0 for lid in LEARNERS for p in range(fragments)}
        self.merged: set[tuple[int, int]] = set()
        self.merge_count = [0] * fragments
        self.waits: dict[tuple[str, int], int] = {}  # (learner, fragment) -> version its accepted upload awaits
        self.snap = self._snapshot()
        self.seq = 0
        self.inflight: dict[tuple, tuple[Contribution, float]] = {}  # announced bodies not yet arrived

    def _snapshot(self) -> list[tuple[np.ndarray, ...]]:
        out = []
        for p, frag in enumerate(self.st.fragments):
            leaves = [np.array(x) for x in jax.tree_util.tree_leaves(self.st.opt_states[p])]
            out.append((*[self.st.params[n].copy() for n in frag.names], *leaves))
        return out

    def _fingerprint(self) -> tuple:
        """Everything an upload may change: parameters, momentum, versions and the pending rounds."""
        arrays = tuple(x.tobytes() for snap in self._snapshot() for x in snap)
        pending = tuple(
            sorted(
                (q, x.round, tuple(sorted((k, c.round, c.base_version) for k, c in x.contributions.items())))
                for q, x in self.st.rounds.items()
            )
        )
        return arrays, tuple(self.st.versions), pending

    def _merge_due(self) -> None:
        before = self._snapshot()
        merged_now: set[int] = set()
        for p in self.st.due_merges(self.now):
            rnd = self.st.rounds[p]
            opens = self.st.clock.time_of(round_opens(self.st.fragment_schedule, p, rnd.round))
            hold = self.st.hold_s
            unheld = self.st._unheld_merge_at(rnd, self.now)  # quorum + grace, before waiting for any body
            rec = self.st.merge(p, self.now)
            for c, at in self.inflight.values():
                if c.fragment == p and c.round <= rec.round and unheld is not None and at <= unheld + 1e-9:
                    assert self.now >= at + hold - 1e-9, (
                        f"round {rec.round} of fragment {p} merged while {c.learner_id}'s announced body was due"
                    )
            assert (p, rec.round) not in self.merged, f"round {rec.round} of fragment {p} merged twice"
            assert opens is None or self.now >= opens - 1e-9, f"round {rec.round} merged before it opened"
            self.merged.add((p, rec.round))
            self.merge_count[p] += 1
            merged_now.add(p)
            who = {x.learner_id for x in rec.participants}
            for (lid, q), want in list(self.waits.items()):
                if q == p and want == rec.version:
                    assert lid in who, f"{lid} waits for v{want} of fragment {p}, which lacks its upload"
                    del self.waits[(lid, q)]
            for lid in who:
                self.held[(lid, p)] = rec.version  # it applies the merge it took part in
        for p, (old, new) in enumerate(zip(before, self._snapshot())):
            if p not in merged_now:  # no merge, no step: parameters and momentum untouched
                assert all(np.array_equal(x, y) for x, y in zip(old, new)), f"fragment {p} changed without a merge"

    @rule(dt=st.sampled_from([0.05, 0.2, 0.6, 1.0, 2.7]))
    def advance(self, dt: float) -> None:
        self.now += dt
        self._merge_due()

    def _contribution(self, lid: str, frag: int, offset: int, stale_base: bool) -> Contribution:
        p = frag % len(self.st.fragments)
        r = max(self.st.current_round(p, self.now) + offset, 0)
        base = self.held[(lid, p)]
        if stale_base and base > 0:
            base -= 1
        self.seq += 1
        return Contribution(
            lid,
            "i",
            p,
            base,
            {
                n: np.full(self.st.params[n].shape, -0.01 * self.seq, np.float32)
                for n in self.st.fragments[p].names
            },
            4,
            256,
            round=r,
        )

    @rule(
        lid=st.sampled_from(LEARNERS),
        frag=st.integers(0, 1),
        offset=st.sampled_from([-2, -1, 0, 0, 0, 1, 3]),
        stale_base=st.booleans(),
    )
    def upload(self, lid: str, frag: int, offset: int, stale_base: bool) -> None:
        self._submit(self._contribution(lid, frag, offset, stale_base))

    @rule(
        lid=st.sampled_from(LEARNERS),
        frag=st.integers(0, 1),
        offset=st.sampled_from([-1, 0, 0, 0, 1]),
        stale_base=st.booleans(),
    )
    def header(self, lid: str, frag: int, offset: int, stale_base: bool) -> None:
        """An upload's header arrives; its body comes later (``body``), or never (``body_lost``)."""
        c = self._contribution(lid, frag, offset, stale_base)
        before = (self._fingerprint(), dict(self.st.announced))
        specs = {n: (tuple(t.shape), str(t.dtype)) for n, t in c.tensors.items()}
        try:
            self.st.announce(
                c.learner_id,
                c.incarnation,
                c.fragment,
                c.base_version,
                specs,
                c.c_steps,
                c.c_tokens,
                self.now,
                c.round,
            )
        except Rejected:
            assert (self._fingerprint(), dict(self.st.announced)) == before, "a refused header changed the state"
            return
        assert self._fingerprint() == before[0], "a header changed the model, versions or rounds"
        if (
            c.key not in self.st.announced
        ):  # the same upload again: acknowledged as a duplicate, nothing to wait for
            rnd = self.st.rounds.get(c.fragment)
            assert c.key in self.st.merged_keys or (
                rnd is not None and any(x.key == c.key for x in rnd.contributions.values())
            ), "an accepted new header was not announced"
            return
        self.inflight[c.key] = (c, self.now)

    @rule(pick=st.integers(0, 100), lost=st.sampled_from([False, False, False, True]))
    def body(self, pick: int, lost: bool) -> None:
        if not self.inflight:
            return
        key = sorted(self.inflight)[pick % len(self.inflight)]
        c, _ = self.inflight.pop(key)
        if lost:  # its call failed: the shell withdraws it
            self.st.withdraw(key)
            assert key not in self.st.announced
            return
        self._submit(c)
        assert key not in self.st.announced

    def _submit(self, c: Contribution) -> None:
        self.inflight.pop(c.key, None)  # the body of an announced upload with this key is here
        lid, p, r, base = c.learner_id, c.fragment, c.round, c.base_version
        last = self.st.last_round[p]
        before = self._fingerprint()
        try:
            res = self.st.submit(c, self.now)
        except Rejected as err:
            assert self._fingerprint() == before, "a refused upload changed the state"
            if r <= last and self.st.policy.algorithm.late_uploads == "refuse":
                assert err.reason in (RejectReason.LATE_ROUND, RejectReason.STALE_VERSION), err
            return
        if res.duplicate:  # the same (learner, incarnation, fragment, base, round) again: acknowledged only
            assert self._fingerprint() == before, "a duplicate changed the state"
            return
        late = r <= last
        assert res.late == late
        assert not late or self.st.policy.algorithm.late_uploads == "carry", (
            "a late upload was accepted under refuse"
        )
        rnd = self.st.rounds[p]
        assert rnd.round > last, "a pending round is never one that has merged"
        opens = self.st.clock.time_of(round_opens(self.st.fragment_schedule, p, rnd.round))
        assert opens is not None and (not late or opens > last), "a carried upload opened no round of its own"
        want = upload_outcome(True, "", base, res.current_version).want
        assert want is not None and want > self.st.versions[p], (
            f"{lid} would take v{want} of fragment {p}, a merge made before its upload arrived"
        )
        self.waits[(lid, p)] = want  # a newer upload replaces the older wait: it is in the same pending round

    @invariant()
    def versions_count_merges(self) -> None:
        if hasattr(self, "st"):
            assert self.st.versions == self.merge_count


TestClockRounds = ClockRounds.TestCase
TestClockRounds.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
