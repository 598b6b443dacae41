"""The merge audit: a model check of every merge, in Jepsen's sense.

The syncer records what each merge consumed and produced (``merge`` events carry digests; a seeded sample of merges
is kept whole, :mod:`trainer.audit_log`). This checker, reading only the history and those arrays:

1. **recomputes** every kept merge with the independent numpy reference (:mod:`chaos.checkers.merge_reference`:
   rebase, token weights, mean/RDA per tensor, the Nesterov outer step) and compares the merged update, the new
   fragment and the new optimizer state, float32 round-off the only tolerance; a kept file must hold the very
   arrays its event digested;
2. **chains** every merge of a fragment, kept or not, by digest: it starts from the value and optimizer state the
   previous merge produced (or the syncer's start, or what a restore restored), so no state is lost, reset or
   swapped between merges; every checkpoint holds the state of that moment; every restore restored the newest
   checkpoint written (an older one only when the syncer says newer ones were unreadable), all of it — the
   metadata's digest (versions less the skip, clock, token ledger, merged keys …) included;
3. **times every merge** (rounds on the clock): K contributions, no earlier than its opening and quorum plus the
   grace window the syncer's own moving averages give (the reference's :func:`grace_s`), and no later than that
   window's cap, a hold and a few of the run's rounds after the round first held its quorum past its opening;
4. **follows the tensors**: each merged contribution is the upload the syncer received (``upload`` digest); each
   learner that applied version v of fragment p (or fetched the state) then held the syncer's bits for it, and
   each sync a learner started was computed against the syncer's value of the base version it names.

5. **takes nothing on the syncer's word** (:mod:`chaos.checkers.audit_inputs`): the step's hyperparameters from the
   config, each contribution's anchor from the chain, its counters and participation from its learner's own log
   (the evidence's ``inputs`` names anything taken on trust); and where every merge was kept whole, **re-executes the
   whole run** from the config's initial parameters and the recorded uploads to the final checkpoint
   (:mod:`chaos.checkers.reexecution`).

A history without digests (a log from before the audit) is indeterminate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from chaos.checkers import merge_reference as ref
from chaos.checkers.audit_inputs import MergedOnce, Trust, learner_uploads, merge_inputs, scale_problem
from chaos.checkers.base import CheckInput, MergeFacts, Verdict
from chaos.checkers.reexecution import reexecute_run
from trainer import events as ev

ROUNDOFF = 64.0  # float32 round-off units (merge_reference.max_error) a recomputed tensor may differ by
SHOWN = 5  # problems listed in the evidence (all are counted)
# A due round may merge this many of the run's rounds (bounds.RunPace.round_s) late: a real shell's driver can stall
# (1.15 s once in containers on a loaded machine, ~1.5 rounds there); a round kept waiting with its quorum for longer
# — carried on into later rounds — is a broken quorum rule (partition-majority's lone learner, 16 rounds).
LAG_ROUNDS = 4.0


def recompute(m: ev.Merge, arrays: Mapping[str, np.ndarray], facts: MergeFacts) -> list[str]:
    """What is wrong with one kept merge (empty: it is what the equations give)."""
    assert m.audit is not None
    a = m.audit
    problems: list[str] = []
    parts: dict[str, Any] = {
        p: ref.part(arrays, p) for p in ("base", "opt_before", "opt_after", "delta", "result")
    }
    uploads = [ref.part(arrays, f"upload/{i}") for i in range(len(a.uploads))]
    anchors = [ref.part(arrays, f"anchor/{i}") or None for i in range(len(a.uploads))]
    recorded = {
        "base": a.base,
        "opt_before": a.opt_before,
        "opt_after": a.opt_after,
        "delta": a.delta,
        "result": a.result,
    }
    for part, digest in recorded.items():
        if ref.digest(parts[part]) != digest:
            problems.append(f"its file's {part} is not what the event digested")
    for i, (u, anc) in enumerate(zip(uploads, anchors)):
        if ref.digest(u) != a.uploads[i] or (None if anc is None else ref.digest(anc)) != a.anchors[i]:
            problems.append(f"its file's upload {i} is not what the event digested")
    if problems:
        return problems
    counters = [(p.c_tokens, p.c_steps) for p in m.participants]
    delta = ref.merged_delta(
        uploads,
        anchors,
        parts["base"],
        counters,
        facts.algorithm.merge_rule,
        facts.mean_tensors,
        facts.algorithm.weighting,
    )
    err = ref.max_error(delta, parts["delta"])
    if err > ROUNDOFF:
        problems.append(
            f"merged update differs from the reference by {err:.3g} round-off units "
            f"(rule {facts.algorithm.merge_rule}, {facts.algorithm.weighting} weights from c_tokens, c_steps {counters})"
        )
    if facts.adamw:
        return problems  # data-parallel: the AdamW step is not recomputed (chained by digest only)
    if (wrong := scale_problem(m)) is not None:
        problems.append(wrong)
    result, opt_after = ref.outer_step(
        parts["base"],
        parts["opt_before"],
        delta,
        lr=facts.algorithm.outer_lr,
        momentum=facts.algorithm.outer_momentum,
        nesterov=facts.algorithm.nesterov,
        scale=1.0,  # the config's step: never the scale the merge recorded (audit_inputs.scale_problem)
    )
    for what, want, got in (
        ("new fragment", result, parts["result"]),
        ("optimizer state", opt_after, parts["opt_after"]),
    ):
        err = ref.max_error(want, got)
        if err > ROUNDOFF:
            problems.append(
                f"{what} differs from the reference outer step by {err:.3g} round-off units "
                f"(lr {facts.algorithm.outer_lr}, momentum {facts.algorithm.outer_momentum}, nesterov {facts.algorithm.nesterov})"
            )
    return problems


def timing(m: ev.Merge, facts: MergeFacts, round_s: float | None = None) -> str | None:
    """What is wrong with when ``m`` merged (None: it is what quorum and grace allow): it needs K contributions,
    may merge no earlier than its opening and quorum plus the grace window (none when every active learner is in),
    and no later than grace, a hold and :data:`LAG_ROUNDS` of this run's rounds (``round_s``; None: not bounded)
    after it first could — a round carried on with its quorum in counts from its first opening."""
    d = m.decision
    if d is None:
        return None
    if d.contributions < facts.algorithm.min_quorum:
        return f"merged {d.contributions} contribution(s), fewer than the quorum K = {facts.algorithm.min_quorum}"
    heard = facts.algorithm.grace_waits_for == "heard"
    if (d.awaited_learners is not None) != heard:
        return (
            f"it recorded {d.awaited_learners} learners waited for in a run whose grace window waits for "
            f"{facts.algorithm.grace_waits_for} learners"
        )
    awaited = d.active_learners if d.awaited_learners is None else d.awaited_learners
    if not 0 <= awaited <= d.active_learners:
        return f"it waited for {awaited} learners, more than the {d.active_learners} active"
    after = min(m.wait_s, m.quorum_wait_s)  # since it could first merge: its opening and its quorum both
    grace = (
        0.0
        if d.contributions >= awaited
        else ref.grace_s(
            enabled=facts.algorithm.grace,
            gamma=facts.algorithm.grace_gamma,
            cap_steps=facts.algorithm.grace_cap_steps,
            overlap_steps=facts.algorithm.overlap_floor,
            overlap_auto=facts.algorithm.overlap_auto,
            t_step=d.t_step,
            t_quorum=d.t_quorum,
            t_sync=d.t_upload + d.t_merge + d.t_broadcast,
        )
    )
    if after < grace - 1e-6 * (1 + grace):
        before = "its opening" if m.wait_s < 0 else "the end of its grace window"
        return (
            f"merged {after:.3f}s after its opening and quorum, before {before} ({grace:.3f}s; "
            f"{d.contributions} of {awaited} awaited learners in)"
        )
    limit = due_limit_s(facts, d, round_s)
    if limit is not None and m.due_wait_s is not None and m.due_wait_s > limit:
        return (
            f"merged {m.due_wait_s:.3f}s after its quorum and opening were both in, past grace + hold + "
            f"{LAG_ROUNDS:g} rounds = {limit:.3f}s: a round with its quorum was kept waiting"
        )
    return None


def due_allowance_s(facts: MergeFacts, d: ev.MergeDecision) -> float:
    """What the rule itself lets a due round wait: the grace window's cap and a hold for an announced body."""
    cap = facts.algorithm.grace_cap_steps * d.t_step if facts.algorithm.grace else 0.0
    return cap + ref.hold_s(t_upload=d.t_upload, t_step=d.t_step)


def due_limit_s(facts: MergeFacts, d: ev.MergeDecision, round_s: float | None) -> float | None:
    """How long after its quorum and opening a round may merge: :func:`due_allowance_s` and :data:`LAG_ROUNDS`
    rounds of this run's pace for a shell's lag (a stalled thread: 1.15 s once in containers on a loaded machine).
    None: the pace was not measured."""
    if round_s is None:
        return None
    return due_allowance_s(facts, d) + LAG_ROUNDS * round_s


class _Chain:
    """Per fragment, the (value, optimizer state) digests the syncer must hold now; values by (fragment, version)."""

    def __init__(self) -> None:
        self.state: dict[int, tuple[str, str]] = {}
        self.values: dict[tuple[int, int], set[str]] = defaultdict(set)
        self.checkpoints: list[ev.Checkpoint] = []
        self.problems: list[str] = []

    def set_all(self, digests: list[ev.FragmentDigest], versions: list[int]) -> None:
        for p, (d, v) in enumerate(zip(digests, versions)):
            self.state[p] = (d.params, d.opt)
            self.values[(p, v)].add(d.params)

    def start(self, e: ev.SyncerStart) -> None:
        if e.digests:
            self.set_all(e.digests, e.versions)

    def merge(self, m: ev.Merge, when: float) -> None:
        a = m.audit
        assert a is not None
        held = self.state.get(m.fragment)
        if held is not None and held != (a.base, a.opt_before):
            what = " and ".join(
                w
                for w, ok in (("value", held[0] == a.base), ("optimizer state", held[1] == a.opt_before))
                if not ok
            )
            self.problems.append(
                f"merge {m.merges_total} (fragment {m.fragment} → v{m.version}, t={when:.1f}s) "
                f"started from a {what} other than the syncer held (lost or reset between merges)"
            )
        produced = self.values[(m.fragment, m.version)]
        if produced and a.result not in produced:
            self.problems.append(
                f"version {m.version} of fragment {m.fragment} was produced twice with different "
                "values (versions went backwards)"
            )
        produced.add(a.result)
        self.state[m.fragment] = (a.result, a.opt_after)

    def checkpoint(self, c: ev.Checkpoint, when: float) -> None:
        self.checkpoints.append(c)
        for p, d in enumerate(c.digests):
            if self.state.get(p, (d.params, d.opt)) != (d.params, d.opt):
                self.problems.append(
                    f"checkpoint at merge {c.merges_total} (t={when:.1f}s) holds a fragment {p} "
                    "other than the syncer's state at that moment (a field left out?)"
                )

    def restore(self, r: ev.Restore, when: float, interval: int) -> None:
        if not r.digests:
            return
        written = [c for c in self.checkpoints if c.digests]
        same = [
            c for c in written if [(d.params, d.opt) for d in c.digests] == [(d.params, d.opt) for d in r.digests]
        ]
        if not same:
            self.problems.append(
                f"restore at t={when:.1f}s restored a state no checkpoint held (merges_total "
                f"{r.merges_total}): a field missing from the checkpoint or the restore?"
            )
        elif r.state_digest and same[-1].state_digest and r.state_digest != same[-1].state_digest:
            self.problems.append(
                f"restore at t={when:.1f}s restored syncer state (versions, clock, token ledger, "
                f"merged keys …) other than the checkpoint of merge {same[-1].merges_total} held: a "
                "field left out of the restore"
            )
        elif written and same[-1] is not written[-1] and r.version_skip <= interval:
            self.problems.append(
                f"restore at t={when:.1f}s took the checkpoint of merge {same[-1].merges_total}, "
                f"not the newest ({written[-1].merges_total}), and says no newer one was unreadable"
            )
        self.set_all(r.digests, r.versions)


def check_audit(inp: CheckInput) -> Verdict:
    h = inp.history
    merges = h.of(ev.Merge)
    audited = [m for m in merges if m.audit is not None]
    if not merges:
        return Verdict("audit", "indeterminate", "no merge to audit")
    if len(audited) < len(merges):
        return Verdict(
            "audit",
            "indeterminate",
            f"{len(merges) - len(audited)} of {len(merges)} merges carry no "
            "audit digests (a log from before the merge audit)",
        )
    t0 = h.start
    chain = _Chain()
    algorithm = inp.facts.merge.algorithm
    sent, trust, once = learner_uploads(h, algorithm.clocked), Trust(), MergedOnce()
    logged = frozenset((e.learner_id, e.learner_incarnation) for e in h.of(ev.LearnerStart))
    uploads: dict[tuple[str, str, int, int, int], str] = {}
    for e in sorted(h.of(ev.SyncerStart, ev.Merge, ev.Checkpoint, ev.Restore, ev.Upload), key=lambda e: e.ts):
        if isinstance(e, ev.SyncerStart):
            chain.start(e)
            once.restart(e.restored_from_merges)
        elif isinstance(e, ev.Merge):
            chain.problems += [
                f"merge {e.merges_total} (fragment {e.fragment} → v{e.version}, t={e.ts - t0:.1f}s) {p}"
                for p in merge_inputs(
                    e,
                    sent,
                    chain.values,
                    clocked=algorithm.clocked,
                    rebases=algorithm.rebases,
                    tokens_per_step=inp.facts.merge.tokens_per_step,
                    trust=trust,
                    once=once,
                    logged=logged,
                )
            ]
            chain.merge(e, e.ts - t0)
            for i, p in enumerate(e.participants):
                got = uploads.get((p.learner_id, p.incarnation, e.fragment, p.base_version, p.round))
                if got is not None and e.audit is not None and got != e.audit.uploads[i]:
                    chain.problems.append(
                        f"merge {e.merges_total} (fragment {e.fragment}) merged a contribution of "
                        f"{p.learner_id} other than the upload it received"
                    )
        elif isinstance(e, ev.Checkpoint):
            chain.checkpoint(e, e.ts - t0)
        elif isinstance(e, ev.Restore):
            chain.restore(e, e.ts - t0, inp.facts.checkpoint_every_merges)
        elif e.digest and not e.duplicate:
            uploads.setdefault(
                (e.learner_id, e.learner_incarnation, e.fragment, e.base_version, e.round), e.digest
            )
    problems = chain.problems
    pace, lag_rounds = inp.pace, 0.0
    if inp.facts.merge.algorithm.clocked:
        for m in audited:
            if (
                pace.round_s and m.decision is not None and m.due_wait_s is not None
            ):  # the margin, for the evidence
                lag = m.due_wait_s - due_allowance_s(inp.facts.merge, m.decision)
                lag_rounds = max(lag_rounds, lag / pace.round_s)
            wrong = timing(m, inp.facts.merge, pace.round_s)
            if wrong is not None:
                problems.append(
                    f"merge {m.merges_total} (fragment {m.fragment} → v{m.version}, t={m.ts - t0:.1f}s) {wrong}"
                )
    held = 0
    for e in h.of(ev.Apply, ev.StateFetch, ev.SyncStartEvent):
        if isinstance(e, ev.Apply):
            pairs, doing = [(e.fragment, e.version, e.digest)], "after applying"
        elif isinstance(e, ev.StateFetch):
            pairs, doing = list(zip(range(len(e.digests)), e.versions, e.digests)), "after fetching"
        else:  # the base its outer gradient is computed against must be the syncer's value of the version it names
            pairs, doing = [(e.fragment, e.base_version, e.base_digest)], "as the base of a sync of"
        for frag, v, d in pairs:
            if not d:
                continue
            held += 1
            known = chain.values.get((frag, v))
            if known is not None and d not in known:
                problems.append(
                    f"{e.source} holds a fragment {frag} v{v} other than the syncer's {doing} it (t={e.ts - t0:.1f}s)"
                )
    kept = [m for m in audited if m.audit is not None and m.audit.file]
    recomputed, missing = 0, 0
    for m in kept:
        assert m.audit is not None
        arrays = inp.audit_files.get(m.audit.file)
        if arrays is None:
            missing += 1
            continue
        recomputed += 1
        problems += [
            f"merge {m.merges_total} (fragment {m.fragment} → v{m.version}, {m.audit.file}): {p}"
            for p in recompute(m, arrays, inp.facts.merge)
        ]
    reexecuted, reexecution_problems = reexecute_run(
        h, inp.facts.merge, inp.audit_files, inp.initial_params, inp.final_checkpoint, ROUNDOFF, inp.inner_steps
    )
    problems += reexecution_problems
    evidence = {
        "merges": len(merges),
        "recomputed": recomputed,
        "reexecution": reexecuted,
        "lag_rounds_max": round(lag_rounds, 3),
        "kept_missing": missing,
        "learner_values": held,
        "inputs": trust.evidence(),
        "problems": len(problems),
        "first_problems": problems[:SHOWN],
    }
    if missing and recomputed:  # some kept files are there: the others were lost or damaged
        problems += [
            f"merge {m.merges_total} (fragment {m.fragment} → v{m.version}): its kept file "
            f"{m.audit.file} is missing or unreadable"
            for m in kept
            if m.audit is not None and m.audit.file not in inp.audit_files
        ]
        evidence["problems"], evidence["first_problems"] = len(problems), problems[:SHOWN]
    if problems:
        return Verdict("audit", "fail", f"{len(problems)} problem(s); first: {problems[0]}", evidence)
    if missing:
        return Verdict(
            "audit",
            "indeterminate",
            f"none of the {missing} kept merges' files could be read (the run directory's audit/)",
            evidence,
        )
    step = (
        "the merged update (the AdamW step chained by digest)"
        if inp.facts.merge.adamw
        else "update, step and state"
    )
    return Verdict(
        "audit",
        "pass",
        f"{recomputed} of {len(merges)} merges recomputed by the reference ({step}) with the config's "
        f"hyperparameters; every merge chained; {held} learner-held values were the syncer's; "
        f"{trust.derived['anchors']} anchors from the chain, {trust.derived['counters']} contributions' counters "
        "and participation from the learners' logs"
        + (f" ({trust.merges_trusting} merge(s) took inputs on trust: evidence)" if trust.merges_trusting else "")
        + (
            "; the whole run, re-executed from the config's initial state, reaches its final checkpoint"
            if reexecuted["ran"]
            else ""
        )
        + (
            f", and the {learners['uploads']} merged uploads are what their learners' re-executed inner steps make"
            if isinstance(learners := reexecuted.get("learners"), dict) and learners.get("ran")
            else ""
        ),
        evidence,
    )
