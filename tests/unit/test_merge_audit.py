"""The merge audit's parts, each shown to fire on the defect it exists for (deterministic mode, planted in-process
by the test only), and its reference shown independent of the trainer's core and equal to it on random merges."""

from __future__ import annotations

import ast
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, cast
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainer.core.syncer_state as ss
from chaos.checkers import audit
from chaos.checkers import merge_reference as ref
from chaos.checkers.base import MergeFacts
from chaos.scenario import scenario_with
from chaos.sim import SimOptions, simulate
from trainer import events as ev
from trainer.audit_log import AUDIT_DIR, AuditWriter
from trainer.core.algorithm import Algorithm
from trainer.core.audit import MergeAudit, digest
from trainer.core.merge import MergeRule, Weighting, merge_fragment
from trainer.core.merge import token_weight as merge_token_weight
from trainer.core.outer import outer_optimizer, outer_step

ROOT = Path(__file__).resolve().parents[2]
OPTS = SimOptions(baseline=False)


def _audit(name: str, **overrides):
    r = simulate(scenario_with(name, **overrides), OPTS)
    return next(v for v in r.verdicts if v.name == "audit")


def test_the_reference_imports_nothing_of_the_trainer() -> None:
    tree = ast.parse((ROOT / "chaos" / "checkers" / "merge_reference.py").read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules <= {"__future__", "hashlib", "math", "collections.abc", "numpy"}, modules


def test_the_digest_is_written_twice_and_agrees() -> None:
    rng = np.random.default_rng(0)
    t = {"b": rng.normal(size=(3, 4)).astype(np.float32), "a": np.arange(5, dtype=np.int32)}
    assert ref.digest(t) == digest(t)
    assert ref.digest({**t, "a": t["a"] + 1}) != digest(t)


tensors = st.integers(1, 4).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, 2**31 - 1)))


@settings(max_examples=40, deadline=None)
@given(
    tensors,
    st.sampled_from(["rda", "mean"]),
    st.floats(0.0, 0.95),
    st.booleans(),
    st.sampled_from(["tokens", "uniform"]),
)
def test_the_reference_equals_the_core_on_random_merges(
    shape, rule: MergeRule, momentum: float, nesterov: bool, weighting: Weighting
) -> None:
    n, seed = shape
    rng = np.random.default_rng(seed)
    names = ["embed", "w", "b"]
    base = {k: rng.normal(size=(n, 3)).astype(np.float32) for k in names}
    uploads = [{k: rng.normal(size=(n, 3)).astype(np.float32) for k in names} for _ in range(n)]
    anchors = [None if i % 2 else {k: rng.normal(size=(n, 3)).astype(np.float32) for k in names} for i in range(n)]
    counters = [(int(rng.integers(0, 5000)), int(rng.integers(0, 9))) for _ in range(n)]
    vectors = [u if a is None else {k: u[k] + (base[k] - a[k]) for k in names} for u, a in zip(uploads, anchors)]
    weights = [merge_token_weight(t, s, weighting) for t, s in counters]
    delta = merge_fragment(vectors, weights, rule, ("embed",))
    want = ref.merged_delta(uploads, anchors, base, counters, rule, ("embed",), weighting)
    assert ref.max_error(want, delta) < 64
    opt = outer_optimizer(0.7, momentum, nesterov)
    state = opt.init(base)
    for _ in range(2):  # twice: the second step reads the momentum the first left
        before = (
            {f"momentum/{k}": np.asarray(v) for k, v in getattr(state[0], "trace", {}).items()} if momentum else {}
        )
        new, state = outer_step(opt, state, base, delta)
        want, _ = ref.outer_step(base, before, delta, lr=0.7, momentum=momentum, nesterov=nesterov, scale=1.0)
        assert ref.max_error(want, new) < 64
        base = new


def test_every_built_in_mechanism_passes_the_audit_unmutated() -> None:
    v = _audit("syncer-crash")
    assert v.status == "pass", v
    assert v.evidence["recomputed"] == v.evidence["merges"] > 100 and v.evidence["learner_values"] > 100


def _momentum_lost_on_restore(orig):
    def restore(cls, policy, fragments, arrays, meta, version_skip):
        st = orig.__func__(cls, policy, fragments, arrays, meta, version_skip)
        st.opt_states = [policy.optimizer.init(cls._frag(st.params, f)) for f in fragments]  # the field left out
        return st

    return classmethod(restore)


PLANTED: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    # merge arithmetic: uniform weights instead of c_tokens²/c_steps
    "weights": lambda: mock.patch.object(ss, "token_weight", lambda t, s, w="tokens": 1.0),
    # a contribution dropped from the merge while still listed among the participants
    "dropped": lambda: mock.patch.object(
        ss, "merge_fragment", lambda v, w, r, m=(): merge_fragment(v[:-1] or v, w[:-1] or w, r, m)
    ),
    # the outer momentum not carried from one merge to the next
    "momentum reset": lambda: mock.patch.object(
        ss, "outer_step", lambda opt, s, p, g, scale=1.0: outer_step(opt, opt.init(p), p, g, scale)
    ),
    # the restore path leaves the optimizer state out
    "restore without momentum": lambda: mock.patch.object(
        ss.SyncerState, "from_checkpoint", _momentum_lost_on_restore(ss.SyncerState.__dict__["from_checkpoint"])
    ),
}


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_the_audit_fails_each_planted_defect_naming_the_merge(defect: str) -> None:
    with PLANTED[defect]():
        v = _audit("syncer-crash")
    assert v.status == "fail", v
    assert "merge " in v.summary or "restore" in v.summary, v.summary


def test_a_restored_state_no_checkpoint_held_is_named() -> None:
    with PLANTED["restore without momentum"]():
        v = _audit("syncer-crash")
    assert any(
        "restored a state no checkpoint held" in p or "optimizer state other than" in p
        for p in v.evidence["first_problems"]
    ), v.evidence


def _timed(
    due_wait_s: float | None,
    contributions: int = 1,
    active: int = 3,
    awaited: int | None = None,
    after_s: float = 0.2,
) -> ev.Merge:
    d = ev.MergeDecision(
        awaited_learners=awaited,
        contributions=contributions,
        active_learners=active,
        t_step=0.1,
        t_quorum=0.05,
        t_upload=0.02,
        t_merge=0.01,
        t_broadcast=0.01,
    )
    return ev.Merge(
        ts=0.0,
        source="syncer",
        fragment=0,
        version=3,
        base_version=2,
        participants=[],
        rule="rda",
        wait_s=after_s,
        quorum_wait_s=after_s,
        outer_grad_norm=1.0,
        merges_total=3,
        tokens_total=0,
        decision=d,
        due_wait_s=due_wait_s,
    )


def test_a_round_kept_waiting_with_its_quorum_fails_the_timing() -> None:
    facts = MergeFacts()  # K = 1, grace capped at one step (0.1 s); a hold here is one step (0.1 s)
    decision = _timed(None).decision
    assert decision is not None
    limit = audit.due_limit_s(facts, decision, round_s=0.5)
    assert limit is not None and limit == pytest.approx(0.1 + 0.1 + audit.LAG_ROUNDS * 0.5)
    assert audit.timing(_timed(limit - 0.01), facts, round_s=0.5) is None
    wrong = audit.timing(_timed(limit + 0.01), facts, round_s=0.5)  # negative control: just past the bound
    assert wrong is not None and "kept waiting" in wrong, wrong
    assert audit.timing(_timed(100.0), facts, round_s=None) is None  # no measured pace: not bounded
    assert audit.timing(_timed(None), facts, round_s=0.5) is None  # a log from before the field


def test_a_carried_round_keeps_the_moment_it_first_was_due() -> None:
    r = ss.Round(0, 0, opened_at=2.0, round=4, quorum_at=2.5)
    r.eligible_at = r.eligible_since(3.0)  # carried at t=3 into round 5, which opens at t=4
    r.round, r.opened_at = 5, 4.0
    assert r.eligible_since(4.5) == 2.5
    assert ss.Round(0, 0, opened_at=4.0, quorum_at=2.5).eligible_since(4.5) == 4.0  # never carried: its opening


def test_a_round_that_waited_only_for_learners_heard_lately_is_judged_by_them() -> None:
    """grace_waits_for heard: 1 of 3 active learners in, but only that one heard lately, so the round was due at once;
    with all 3 awaited it must wait the grace window (0.055 s here: τ 2, t_step 0.1, t_quorum + t_sync 0.09, γ 0.5)."""
    heard = MergeFacts(algorithm=Algorithm(grace_waits_for="heard"))
    assert audit.timing(_timed(None, awaited=1, after_s=0.0), heard) is None
    early = audit.timing(_timed(None, awaited=3, after_s=0.01), heard)
    assert early is not None and "(0.055s; 1 of 3 awaited learners in)" in early, early
    assert "more than the 3 active" in (audit.timing(_timed(None, awaited=4), heard) or "")
    # A syncer that skips the silent in a run configured to wait for every active learner is named, and so is one
    # that records nothing where the run waits only for those heard.
    wrong = audit.timing(_timed(None, awaited=1, after_s=0.0), MergeFacts())
    assert wrong is not None and "waits for active learners" in wrong, wrong
    assert "waits for heard learners" in (audit.timing(_timed(None, after_s=0.0), heard) or "")


def test_uniform_weights_are_audited_as_uniform() -> None:
    """``algorithm.weighting: uniform`` passes the audit, and a syncer that ignores it (token weights) fails it."""
    uniform = {"cluster": {"algorithm": {"weighting": "uniform"}}}
    assert _audit("straggler", **uniform).status == "pass"
    with mock.patch.object(ss, "token_weight", lambda t, s, w="tokens": merge_token_weight(t, s)):
        v = _audit("straggler", **uniform)
    assert v.status == "fail" and "uniform weights" in " ".join(v.evidence["first_problems"]), v


def _merge_audit(version: int, n: int = 10_000) -> MergeAudit:
    t = {"w": np.full(n, float(version), np.float32)}
    return MergeAudit(0, version - 1, version, t, (t,), (None,), t, t, t, t, 1.0)


def test_kept_audit_files_stay_within_their_byte_bound_across_a_restart(tmp_path: Path) -> None:
    """Invariant `output` (docs/security.md): a long run keeps whole merges only up to syncer.audit_keep_bytes, the
    files a restarted syncer finds counted; past it every merge is still digested."""
    bound = 250_000  # about three merges of these (6 arrays of 40 KB each)
    w = AuditWriter(tmp_path, keep_fraction=1.0, seed=0, keep_bytes=bound)
    names = [w.record(_merge_audit(v), "a").file for v in range(1, 6)]
    assert names[:1] and names[0] and not names[-1], names
    restarted = AuditWriter(tmp_path, keep_fraction=1.0, seed=0, keep_bytes=bound)
    more = [restarted.record(_merge_audit(v), "b") for v in range(6, 10)]
    assert not any(d.file for d in more) and all(d.result for d in more)
    on_disk = sum(p.stat().st_size for p in (tmp_path / AUDIT_DIR).glob("*.npz"))
    assert 0 < on_disk <= bound, on_disk


def test_the_evidence_says_which_inputs_were_derived_and_which_taken_on_trust() -> None:
    """Every input from a source the syncer does not control in a run where every unit wrote its events; where a
    learner's log is missing, its contributions' counters and participation are taken on trust, and named."""
    from chaos.checkers.base import CheckInput, RunFacts
    from chaos.history import History

    scenario = scenario_with("kill-and-rejoin")
    r = simulate(scenario, OPTS)
    v = next(v for v in r.verdicts if v.name == "audit")
    inputs = cast(dict[str, Any], v.evidence["inputs"])
    assert v.status == "pass" and inputs["on_trust"] == {} and inputs["merges_with_inputs_on_trust"] == 0, v
    assert inputs["derived"]["anchors"] == inputs["derived"]["counters"] == inputs["derived"]["participants"] > 100
    assert "config" in inputs["hyperparameters"]

    def judged(keep) -> audit.Verdict:
        events = [e for e in r.history.events if keep(e)]
        files = r.audit.files if r.audit is not None else {}
        inp = CheckInput(
            History(r.history.records, events), RunFacts.of(scenario), scenario.checks, None, audit_files=files
        )
        return audit.check_audit(inp)

    blind = judged(lambda e: e.source != "learner-1")  # learner-1's whole log missing: its inputs taken on trust
    trusted = cast(dict[str, Any], blind.evidence["inputs"])
    assert trusted["merges_with_inputs_on_trust"] > 0 and "learner-1" in trusted["first_on_trust"][0], trusted
    assert blind.status != "fail", blind
    # its log there but without its sync_starts: the syncer merged uploads its learner never sent
    unsent = judged(lambda e: not (isinstance(e, ev.SyncStartEvent) and e.source == "learner-1"))
    assert unsent.status == "fail" and "never sent" in unsent.summary, unsent.summary


def _merge(n: int, version: int) -> ev.Merge:
    p = ev.ParticipantInfo(
        learner_id="learner-0",
        incarnation="learner-0.0",
        weight=1.0,
        c_steps=8,
        c_tokens=512,
        base_version=0,
        round=0,
    )
    digests = ev.MergeDigests(
        base="b", uploads=["u"], anchors=[None], opt_before="o", opt_after="o2", delta="d", result="r"
    )
    return ev.Merge(
        ts=float(n),
        source="syncer",
        fragment=0,
        version=version,
        base_version=version - 1,
        participants=[p],
        rule="rda",
        wait_s=0.0,
        quorum_wait_s=0.0,
        outer_grad_norm=1.0,
        merges_total=n,
        tokens_total=0,
        audit=digests,
    )


def test_an_upload_merges_once_unless_a_restart_undid_its_merge() -> None:
    """The merged-once rule (audit_inputs.MergedOnce), which no deterministic-mode mutant reaches (learners there never
    re-send an upload): the same upload key in two merges fails, naming the first; after a restart that restored a
    checkpoint from before the first merge, merging it again is what the restored syncer must do."""
    from chaos.checkers.audit_inputs import MergedOnce, Sent, Trust, merge_inputs

    key = ("learner-0", "learner-0.0", 0, 0, 0)
    sent = {key: Sent(8, 512, "")}
    chain = {(0, 0): {"b"}}

    def judge(m: ev.Merge, once: MergedOnce) -> list[str]:
        return merge_inputs(
            m, sent, chain, clocked=True, rebases=True, tokens_per_step=64, trust=Trust(), once=once
        )

    once = MergedOnce()
    assert judge(_merge(1, 1), once) == []
    again = judge(_merge(2, 1), once)  # (its base v0 is the round's start again: only the repeat is wrong)
    assert len(again) == 1 and "merge 1 had merged that upload" in again[0], again
    once = MergedOnce()
    judge(_merge(1, 1), once)
    once.restart(0)  # the restored checkpoint was written before merge 1: that merge was undone
    assert judge(_merge(2, 1), once) == []


def test_a_participant_its_learner_was_told_was_refused_or_sent_other_counters_fails() -> None:
    """The participant and counter rules against the learner's own record (audit_inputs.merge_inputs): merged though
    its learner was told refused; weighted by counters it never sent; and a counter the documented cap allows."""
    from chaos.checkers.audit_inputs import MergedOnce, Sent, Trust, merge_inputs

    key = ("learner-0", "learner-0.0", 0, 0, 0)

    def judge(sent: Sent) -> list[str]:
        return merge_inputs(
            _merge(1, 1),
            {key: sent},
            {(0, 0): {"b"}},
            clocked=True,
            rebases=True,
            tokens_per_step=64,
            trust=Trust(),
            once=MergedOnce(),
        )

    assert judge(Sent(8, 512, "")) == []  # as sent, accepted
    assert judge(Sent(9, 576, "")) == []  # the syncer capped 9 steps to 8, at 64 tokens a step
    refused = judge(Sent(8, 512, "late_round"))
    assert len(refused) == 1 and "told was refused (late_round)" in refused[0], refused
    other = judge(Sent(8, 640, ""))
    assert len(other) == 1 and "its learner sent c_steps 8, c_tokens 640" in other[0], other
