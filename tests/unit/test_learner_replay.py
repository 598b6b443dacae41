"""The learner replay (chaos.checkers.learner_replay): each learner's inner steps re-executed from the values the chain
says it received must make every merged upload of it — across wire formats, α-mixing, rounds on arrival and syncer
restarts, with no false alarm (rounds on arrival without rebasing: the whole-run re-execution once rebased there
too, and failed) — and a learner that trains from anything else fails by name. (The defect only it
catches, a learner that keeps its own parameters and logs the merged bits as held, is the mutant suite's
apply_keeps_local.)"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from chaos.checkers import CheckInput, RunFacts
from chaos.checkers.audit import check_audit
from chaos.checkers.learner_replay import LearnerReplay
from chaos.history import History
from chaos.scenario import scenario_with
from chaos.sim import SimOptions
from chaos.sim.runner import Simulation, plan
from trainer import events as ev

VARIANTS: dict[str, dict[str, Any]] = {
    "kill-and-rejoin": {},
    "syncer-crash": {},
    "corrupt-learner": {},
    "int4, α-mixing": {"cluster": {"algorithm": {"wire_format": "int4", "mix_alpha": 0.5}}},
    "bfloat16, rounds on arrival": {"cluster": {"algorithm": {"wire_format": "bfloat16", "rounds": "arrival"}}},
}


@functools.cache
def _run(label: str) -> tuple[Any, Simulation, History]:
    name = label if label in ("kill-and-rejoin", "syncer-crash", "corrupt-learner") else "kill-and-rejoin"
    s = scenario_with(name, **VARIANTS[label])
    sim = Simulation(s, SimOptions(baseline=False), plan(s))
    sim.run()
    return s, sim, History(sorted(sim.records, key=lambda r: r.ts), sorted(sim.events, key=lambda e: e.ts))


def _audit(label: str, **changes: Any) -> Any:
    s, sim, h = _run(label)
    inp = CheckInput(
        h,
        RunFacts.of(s),
        s.checks,
        None,
        audit_files=sim.audit.files,
        initial_params=sim.problem.init_params(),
        final_checkpoint=sim.syncer.checkpoint[0] if sim.syncer.checkpoint is not None else {},
        inner_steps=sim.inner_steps,
    )
    return check_audit(CheckInput(**{**inp.__dict__, **changes}))


@pytest.mark.parametrize("label", list(VARIANTS))
def test_every_merged_upload_is_what_its_learners_replayed_steps_make(label: str) -> None:
    verdict, s = _audit(label), _run(label)[0]
    learners = verdict.evidence["reexecution"]["learners"]
    assert verdict.status == "pass", verdict.summary
    assert learners["ran"] and learners["uploads"] == learners["of_merged"] > 200, learners
    # float32 round-off alone (measured ≤ 0.03 of what is allowed), or one step of the wire format (≤ 0.63 measured)
    assert learners["worst_of_allowed"] < (0.1 if s.cluster.algorithm.wire_format == "float32" else 1.0), learners
    corrupt = learners["not_replayed"].get("started corrupt by a fault", 0)
    assert (corrupt > 0) == (label == "corrupt-learner"), learners


def test_a_learner_that_trained_from_other_data_fails_naming_it() -> None:
    """Negative control: the replay given another data stream for one learner (its steps' noise drawn from another
    key) must not match that learner's uploads."""
    s, sim, _ = _run("kill-and-rejoin")
    victim = s.learner_ids()[0]

    def steps(learner: str, index: int) -> Any:
        return sim.inner_steps(learner, index + 1000 if learner == victim else index)

    verdict = _audit("kill-and-rejoin", inner_steps=steps)
    assert verdict.status == "fail", verdict.summary
    assert f"{victim} (incarnation" in verdict.summary and "re-executed inner steps" in verdict.summary


def test_real_runs_say_the_learners_were_not_replayed() -> None:
    verdict = _audit("kill-and-rejoin", inner_steps=None)
    assert verdict.status == "pass"
    assert verdict.evidence["reexecution"]["learners"] == {
        "ran": False,
        "why": "no inner step was given (real runs' JAX steps are not re-executed)",
    }


# ---- the replay's rules on hand-made logs ----------------------------------------------------------------------------
def _log(*events: ev.Event) -> list[ev.Event]:
    head: list[ev.Event] = [
        ev.LearnerStart(
            ts=0, source="a", learner_id="a", learner_incarnation="i", pid=1, syncer="s", config_hash=""
        ),
        ev.LearnerJoin(
            ts=1, source="a", learner_incarnation="i", incarnation_index=0, versions=[0], syncer_incarnation="s"
        ),
        ev.StateFetch(ts=2, source="a", versions=[0], seconds=0.1),
    ]
    return head + list(events)


def _sync(ts: float, step: int, base: int = 0) -> ev.SyncStartEvent:
    return ev.SyncStartEvent(
        ts=ts, source="a", fragment=0, base_version=base, c_steps=1, c_tokens=8, step=step, round=0
    )


def _replay(
    alpha: float | None = None, values: dict | None = None
) -> tuple[LearnerReplay, list[tuple[int, float]]]:
    seen: list[tuple[int, float]] = []  # (step count before it, progress) per step taken

    def steps(learner: str, index: int) -> Any:
        def step(params: dict, progress: float) -> dict:
            seen.append((len(seen), progress))
            return {n: v - 1.0 for n, v in params.items()}

        return step

    table = values or {(0, 0): {"w": np.array([10.0], np.float32)}, (0, 1): {"w": np.array([20.0], np.float32)}}
    r = LearnerReplay(steps, {0: ["w"]}, alpha, "float32", False, lambda f, v, ts, d: table.get((f, v)))
    return r, seen


def test_each_step_takes_the_progress_heard_before_it() -> None:
    r, seen = _replay()
    log = _log(ev.ProgressHeard(ts=3, source="a", step=2, progress=0.5), _sync(4, 3))
    log.insert(2, ev.ProgressHeard(ts=1.5, source="a", step=0, progress=0.25))  # heard with the Join: from step 1
    r.run(log)
    assert seen == [(0, 0.25), (1, 0.25), (2, 0.5)]
    assert [u.tensors["w"].tolist() for u in r.expected[("a", "i", 0, 0, 0)]] == [[3.0]]  # 10 − (10 − 3)


@pytest.mark.parametrize("alpha", [None, 0.25])
def test_an_applied_fragment_overwrites_or_mixes_by_the_rule(alpha: float | None) -> None:
    r, _ = _replay(alpha)
    r.run(_log(ev.Apply(ts=3, source="a", fragment=0, version=1, step=1), _sync(4, 3, base=1)))
    # after step 1: θ = 9; apply v1 (20): θ = 20, or 0.25·9 + 0.75·20 = 17.25; two more steps; upload = 20 − θ
    theta = 20.0 if alpha is None else alpha * 9.0 + (1 - alpha) * 20.0
    [u] = r.expected[("a", "i", 0, 1, 0)]
    assert u.tensors["w"].tolist() == [pytest.approx(20.0 - (theta - 2.0))]


def test_a_version_the_chain_never_made_stops_that_process_and_says_why() -> None:
    r, _ = _replay()
    r.run(_log(ev.Apply(ts=3, source="a", fragment=0, version=7, step=1), _sync(4, 3, base=7)))
    assert not r.expected and list(r.unreplayed) == [
        "applied a version the replayed chain never made (a: fragment 0 v7)"
    ]


def test_a_learner_started_corrupt_is_not_replayed() -> None:
    r, _ = _replay()
    log = _log(_sync(4, 3))
    log[0] = log[0].model_copy(update={"corrupt": "garbage"})
    r.run(log)
    assert not r.expected and r.unreplayed == {"started corrupt by a fault": 1}
