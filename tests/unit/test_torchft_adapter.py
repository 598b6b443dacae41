"""torchft's adapter, the pure part (peers/torchft/run.py): the syncer-side record derived from the replica groups'
own events — a merge per committed version with the groups that hold it — and the commit rate in and out of faults.
(The runs themselves need torch: the torchft tier, scripts/torchft-test.)"""

from __future__ import annotations

import importlib.util

import pytest

from chaos.history import ControllerRecord, FaultOp, History, Phase
from peers.torchft.run import commit_rate, derived_events, result_eval
from trainer import events as ev


def _start(ts: float, who: str) -> ev.LearnerStart:
    return ev.LearnerStart(
        ts=ts, source=who, learner_id=who, learner_incarnation=f"{who}.{ts}", pid=1, syncer="", config_hash=""
    )


def _apply(ts: float, who: str, fragment: int, version: int) -> ev.Apply:
    return ev.Apply(ts=ts, source=who, fragment=fragment, version=version, step=1, digest="d")


def test_a_merge_per_committed_version_with_the_groups_that_hold_it() -> None:
    log: list[ev.Event] = [_start(0, "learner-0"), _start(0, "learner-1")]
    log += [_apply(1.0, "learner-0", 0, 1), _apply(1.1, "learner-1", 0, 1), _apply(2.0, "learner-0", 1, 2)]
    log.append(ev.LearnerStop(ts=3, source="learner-0", why="finished", step=4, tokens=8))
    out = derived_events(log, [0.5])
    merges = [e for e in out if isinstance(e, ev.Merge)]
    assert [(m.fragment, m.version, m.ts, [p.learner_id for p in m.participants]) for m in merges] == [
        (0, 1, 1.0, ["learner-0", "learner-1"]),
        (1, 2, 2.0, ["learner-0"]),
    ]
    assert merges[0].participants[1].incarnation == "learner-1.0"
    assert [e.kind for e in out if not isinstance(e, ev.Merge)] == ["syncer_start", "finished"]


def test_commits_per_second_while_faulted_and_clear() -> None:
    fault = dict(fault_id="f0", fault_kind="pause", targets=["learner-1"])
    records: list[ControllerRecord] = [
        Phase(ts=0, name="steady", detail={}),
        FaultOp(ts=10, action="inject", outcome="ok", **fault),
        FaultOp(ts=20, action="heal", outcome="ok", **fault),
    ]
    merges: list[ev.Event] = [
        ev.Merge(
            ts=t,
            source="syncer",
            fragment=0,
            version=i + 1,
            base_version=i,
            participants=[],
            rule="mean",
            wait_s=0,
            quorum_wait_s=0,
            outer_grad_norm=0,
            merges_total=i + 1,
            tokens_total=0,
        )
        for i, t in enumerate([*range(0, 10), *range(10, 20, 2), *range(20, 31)])
    ]
    assert commit_rate(History(records, merges)) == {"faulted": 0.5, "clear": 1.05}


def test_the_cli_says_how_to_get_torchft_when_it_is_not_installed(capsys: pytest.CaptureFixture[str]) -> None:
    """The per-change environment never has torch (the torchft extra is its own tier's)."""
    from chaos.cli import main

    assert importlib.util.find_spec("torchft") is None
    assert main(["run", "kill-and-rejoin", "--sut", "torchft"]) != 0
    assert "pip install -e '.[torchft]'" in capsys.readouterr().err


def test_the_result_is_the_groups_mean_final_eval() -> None:
    evals: list[ev.Event] = [
        ev.Eval(
            ts=t,
            source=who,
            merges_total=9,
            versions=[9],
            loss=x,
            loss_floor=float("nan"),
            tokens_total=100,
            final=True,
        )
        for t, who, x in ((5.0, "learner-0", 1.8), (6.0, "learner-1", 2.0))
    ]
    r = result_eval(evals)
    assert r is not None and r.source == "syncer" and r.final and r.ts == 6.0
    assert (round(r.loss, 6), r.tokens_total) == (1.9, 200)
    assert result_eval([]) is None
