"""The token ledger, each of its books shown to fail on the defect it exists for (deterministic mode; the defects are
planted in-process by this test only), and to balance on an unmodified run."""

from __future__ import annotations

import dataclasses
import functools
from unittest import mock

import pytest

import trainer.core.syncer_state as ss
from chaos.scenario import Scenario, scenario_with
from chaos.sim import SimOptions, SimResult, simulate
from chaos.sim.learner_node import LearnerNode
from chaos.sim.syncer_node import SyncerNode

OPTS = SimOptions(baseline=False)


def _ledger(name: str = "syncer-crash"):
    r = simulate(scenario_with(name), OPTS)
    return next(v for v in r.verdicts if v.name == "ledger")


def test_an_unmodified_run_balances() -> None:
    v = _ledger()
    assert v.status == "pass", v
    syncer = v.evidence["syncer"]
    assert syncer["accepted"] == sum(t for b, t in syncer.items() if b != "accepted") > 0  # every bin, exactly
    assert syncer["lost with the syncer"] > 0  # syncer-crash: pending uploads and undone merges died with it
    learners = v.evidence["learners"]
    assert learners["sent"] == sum(t for b, t in learners.items() if b != "sent")
    budget = v.evidence["budget"]
    assert budget["budget"] <= budget["finished_tokens"]
    # the learners' own counts bracket the syncer's: no more than they trained, no less than they had reported
    learners = budget["learners"]
    assert learners["reported_at_least"] <= budget["finished_tokens"] <= learners["trained_at_most"]
    assert learners["trained_at_least"] >= budget["budget"] * 0.95 and not learners["without_events"]
    assert v.evidence["data"]["streams"] == 3 and v.evidence["data"]["positions"] > 100


def _drop_one(merge):
    def mutated(self, fragment, now):
        rnd = self.rounds[fragment]
        if len(rnd.contributions) > 1:  # one contribution silently dropped from its round
            del rnd.contributions[sorted(rnd.contributions)[-1]]
        return merge(self, fragment, now)

    return mutated


def _halve_counters(handle):
    def mutated(self, c, nbytes, respond, abort):  # the shell hands the core other counters than the learner sent
        return handle(
            self,
            dataclasses.replace(c, c_tokens=c.c_tokens // 2, c_steps=max(c.c_steps // 2, 1)),
            nbytes,
            respond,
            abort,
        )

    return mutated


def _rejoin_replays_first_stream(got_state):
    def mutated(self, values, t0):  # a restarted learner opens its first incarnation's data stream again
        index, self.incarnation_index = self.incarnation_index, 0
        try:
            return got_state(self, values, t0)
        finally:
            self.incarnation_index = index

    return mutated


def _skips_a_batch(step):
    def mutated(self):
        if self.step == 30:
            self.drawn += 1  # one batch drawn and dropped: the data position runs ahead of the steps
        return step(self)

    return mutated


def _keyed_by_learner(report):
    def mutated(self, learner_id, incarnation, step, tokens, step_time_s, now):
        self.tokens_by_incarnation = {  # a restarted learner's count replaces its earlier incarnations'
            k: v
            for k, v in self.tokens_by_incarnation.items()
            if k.split("/")[0] != learner_id or k.endswith(incarnation)
        }
        return report(self, learner_id, incarnation, step, tokens, step_time_s, now)

    return mutated


PLANTED = {
    "a contribution dropped from its round": (
        mock.patch.object(ss.SyncerState, "merge", _drop_one(ss.SyncerState.merge)),
        "left out",
    ),
    "counters changed between learner and syncer": (
        mock.patch.object(SyncerNode, "handle_upload", _halve_counters(SyncerNode.handle_upload)),
        "the syncer counted",
    ),
    "a rejoin replaying its first data stream": (
        mock.patch.object(LearnerNode, "_got_state", _rejoin_replays_first_stream(LearnerNode._got_state)),
        "the same samples twice",
    ),
    "a batch skipped": (
        mock.patch.object(LearnerNode, "_step", _skips_a_batch(LearnerNode._step)),
        "batches of its",
    ),
    "the syncer's token count keyed by learner, not incarnation": (
        mock.patch.object(ss.SyncerState, "report", _keyed_by_learner(ss.SyncerState.report)),
        "learners trained past the budget",
    ),
    "the syncer counting every token twice": (
        mock.patch.object(
            ss.SyncerState, "tokens_total", property(lambda self: 2 * sum(self.tokens_by_incarnation.values()))
        ),
        "counted tokens nobody trained",
    ),
    "the result fixed at twice the budget": (
        mock.patch.object(
            ss.SyncerState,
            "budget_reached",
            property(lambda self: self.tokens_total >= 2 * self.policy.token_budget),
        ),
        "the budget",
    ),
}


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_the_ledger_fails_each_planted_defect(defect: str) -> None:
    patch, says = PLANTED[defect]
    with patch:
        v = _ledger("kill-and-rejoin")
    assert v.status == "fail", v
    assert says in v.summary, v.summary


@functools.cache
def _latency_jitter() -> tuple[Scenario, SimResult]:
    """latency-jitter's run, simulated once for every refolding below, which copy what they change (~55
    late_round refusals per delayed learner)."""
    scenario = scenario_with("latency-jitter")
    return scenario, simulate(scenario, OPTS)


def _refolded(keep_count: bool, at_shutdown: bool = False, folds_for_s: float = 0.0, killed: bool = False):
    """The ledger's learners' book on a deterministic run whose upload refusals the syncer logged folded, as the
    real syncer does beyond a few per learner, reason and window (trainer.core.repeats): per learner and reason
    the first event kept, the others dropped, their number in its ``repeats`` — or, ``at_shutdown``, in an event
    of their own at the end that names no upload, as the syncer drains what it folded when it stops — (or not,
    when ``keep_count`` is false: refusals the learners were told of that the syncer has no record of). Each kept
    one says its kind is folded for ``folds_for_s`` after it; ``killed``: the syncer's ``syncer_stop`` removed, as
    a SIGKILLed one logs none."""
    from chaos.checkers.base import CheckInput, RunFacts
    from chaos.checkers.ledger import check_ledger
    from chaos.history import History
    from trainer import events as ev

    scenario, r = _latency_jitter()
    events: list[ev.Event] = []
    first: dict[tuple[str, str], ev.Reject] = {}
    for e in r.history.events:
        if killed and isinstance(e, ev.SyncerStop):
            continue
        if isinstance(e, ev.Reject) and e.call == "Upload":
            kind = (e.learner_id, e.reason)
            if kind in first:
                if keep_count:
                    first[kind].repeats += 1
                continue
            first[kind] = e = e.model_copy(update={"folds_for_s": folds_for_s})
        events.append(e)
    assert any(e.repeats for e in first.values()) or not keep_count, "the run refused too few uploads to fold"
    if at_shutdown:  # the counts move to carriers after the last event
        end = events[-1].ts
        for (lid, reason), e in first.items():
            if e.repeats:
                carrier = ev.Reject(ts=end, source="syncer", call="Upload", reason=reason, detail="folded")
                events.append(carrier.model_copy(update={"learner_id": lid, "repeats": e.repeats - 1}))
                e.repeats = 0
    inp = CheckInput(History(r.history.records, events), RunFacts.of(scenario), scenario.checks, None)
    return check_ledger(inp)


def test_refusals_the_syncer_folded_are_accounted_for_by_their_count() -> None:
    v = _refolded(keep_count=True)
    assert v.status == "pass", v.summary
    v = _refolded(keep_count=True, at_shutdown=True)
    assert v.status == "pass", v.summary
    v = _refolded(keep_count=False)  # negative control: the count is what accounts for them
    assert v.status == "fail" and "recorded no such refusal" in v.summary, v.summary


def test_refusals_folded_when_the_syncer_was_killed_are_unverifiable_not_missing() -> None:
    """A SIGKILLed syncer loses the count of refusals it folded since its last logged one: a refusal told in a span
    the log says was being folded is not held against it — only there, and only when no syncer_stop followed."""
    v = _refolded(keep_count=False, folds_for_s=1e6, killed=True)
    assert v.status == "pass", v.summary
    assert v.evidence["refusals_in_folds_a_kill_lost"] > 0 and "a killed syncer lost" in v.summary, v.evidence
    # negative controls: a syncer that stopped logged its folded counts; outside a folding span nothing was folded
    v = _refolded(keep_count=False, folds_for_s=1e6)
    assert v.status == "fail" and "recorded no such refusal" in v.summary, v.summary
    v = _refolded(keep_count=False, folds_for_s=0.001, killed=True)
    assert v.status == "fail" and "recorded no such refusal" in v.summary, v.summary


def _learner_events(*spec):
    """A learner ``a``'s events from (kind, ts, tokens) triples: start, step, stop, unreachable, reconnected."""
    from trainer import events as ev

    out, n = [], 0
    for kind, ts, tokens in spec:
        if kind == "start":
            n += 1
            out.append(
                ev.LearnerStart(
                    ts=ts,
                    source="a",
                    learner_id="a",
                    learner_incarnation=f"a.{n}",
                    pid=1,
                    syncer="s",
                    config_hash="",
                )
            )
        elif kind == "step":
            out.append(
                ev.Step(
                    ts=ts, source="a", step=tokens // 10, loss=1.0, tokens=tokens, step_time_s=0.1, blocked_s=0.0
                )
            )
        elif kind == "stop":
            out.append(ev.LearnerStop(ts=ts, source="a", why="budget", step=tokens // 10, tokens=tokens))
        elif kind == "unreachable":
            out.append(ev.Unreachable(ts=ts, source="a", error="down"))
        else:
            out.append(ev.Reconnected(ts=ts, source="a", down_s=1.0))
    return out


def test_what_the_learners_trained_is_bracketed_and_what_they_could_report_excuses_faults() -> None:
    """The learners' side of the budget (chaos.checkers.trained): a killed incarnation counts to its last summary
    (and one interval more at most), an unreachable spell and a syncer restart excuse what could not be counted."""
    from chaos.checkers.trained import Learners

    run = Learners.of(
        _learner_events(
            ("start", 0, 0),
            ("step", 1, 100),
            ("step", 2, 200),  # killed after t=2
            ("start", 5, 0),
            ("step", 6, 100),
            ("unreachable", 6.5, 0),
            ("step", 7, 200),
            ("step", 8, 300),
        )
    )
    assert run.at(7.5, summary_tokens=100) == (200 + 200, 300 + 300)  # the first incarnation: 200, at most 300
    assert run.countable(7.5, lag_s=0.0) == 200 + 100  # the second could not report after 6.5 (unreachable)
    assert run.countable(7.5, lag_s=1.0) == 100 + 0  # a report's lag before each one's last chance
    # a syncer restarted at 4 from a checkpoint written at 1.5: the first incarnation's later reports died with it
    assert run.countable(7.5, lag_s=0.0, restores=[(4.0, 1.5)]) == 100 + 100
    healed = Learners.of(
        _learner_events(
            ("start", 0, 0), ("unreachable", 1, 0), ("reconnected", 2, 0), ("step", 3, 100), ("stop", 4, 150)
        )
    )
    assert healed.countable(5.0, lag_s=0.0) == 150 and healed.at(5.0, summary_tokens=100) == (150, 150)
