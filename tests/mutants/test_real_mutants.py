"""Real-process mutants, per change (light): the registry's modes, the shells' patches, the hook in a child process.

The mutants themselves run on real processes nightly (tests/nightly/test_mutants_real.py: minutes each). Here: every
mode claim is checked against what its patches touch, every shell patch still resolves and takes, each shell mutant
leaves the fault-free path as it is (what ``fault_free_unchanged`` claims: it shares the unmutated baselines), and
a child started with the backend's environment runs the mutant, recording it (plant and watch).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.mutants import real
from tests.mutants.registry import (
    BOTH,
    MUTANTS,
    MUTANTS_BY_NAME,
    REAL,
    REAL_MUTANTS,
    SIM,
    SIM_MUTANTS,
    SS,
    Mutant,
    Patch,
    _join_keeps_initial_weights,
    _load_previous_checkpoint,
    _load_without,
    _no_version_skip,
    _uniform_weight,
    refs,
)
from tests.nightly.test_mutants_real import MEMBERS, member_id

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_runs_somewhere_and_each_tier_takes_its_own() -> None:
    assert set(SIM_MUTANTS) | set(REAL_MUTANTS) == set(MUTANTS)
    assert {m.name for m in MEMBERS} == {m.name for m in REAL_MUTANTS}
    assert all("sim" in m.modes for m in SIM_MUTANTS) and all("real" in m.modes for m in REAL_MUTANTS)
    shell = [m for m in MUTANTS if m.modes == REAL]
    assert len(shell) >= 3 and all(all(not p.module.startswith("trainer.core") for p in m.patches) for m in shell)
    with pytest.raises(ValueError, match="real processes only"):
        with shell[0].applied():  # the deterministic runner cannot apply a shell mutant
            pass
    with pytest.raises(ValueError, match="does not apply to real processes"):
        with real.in_children("wake_missing", Path("/nonexistent")):  # nor a real run a simulated node's
            pass


@pytest.mark.parametrize(
    "modes, module, ffu, why",
    [
        (
            REAL,
            "chaos.sim.syncer_node",
            True,
            "means nothing in mode",
        ),  # a simulated node's patch on real processes
        (SIM, "trainer.syncer", True, "means nothing in mode"),  # a shell's patch in deterministic mode
        (BOTH, SS, False, "must be fault_free_unchanged"),  # real, but its baselines would have to run it
        (("gpu",), SS, True, "not a non-empty subset"),
    ],
)
def test_a_mode_claim_that_cannot_hold_is_refused(
    modes: tuple[str, ...], module: str, ffu: bool, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        Mutant(
            "x",
            "weights",
            "x",
            refs("straggler"),
            (Patch(module, "token_weight", _uniform_weight),),
            fault_free_unchanged=ffu,
            modes=modes,
        )


@pytest.mark.parametrize("name", [m.name for m in REAL_MUTANTS])
def test_each_real_patch_resolves_and_takes_in_this_process(name: str) -> None:
    """The shells' names the patches replace still exist (renamed: fails here, not at night), each is replaced
    while in force and restored after."""
    m = MUTANTS_BY_NAME[name]
    before = {p.target: _current(p) for p in m.patches}
    with m.patched():
        assert all(_current(p) is not before[p.target] for p in m.patches)
    assert {p.target: _current(p) for p in m.patches} == before


def _current(p: Patch) -> object:
    owner, attr = p._owner()
    value = vars(owner).get(attr, getattr(owner, attr))
    return getattr(value, "__func__", value)


# ---- the shell mutants leave the fault-free path as it is ---------------------------------------------------------


def test_rejoin_from_init_acts_on_a_restarted_incarnation_only() -> None:
    fetched, init = {"w": np.full(2, 5.0, np.float32)}, {"w": np.zeros(2, np.float32)}

    def join(self: SimpleNamespace, fetch_state: bool) -> None:
        self.base, self.params = dict(fetched), dict(fetched)

    mutant = _join_keeps_initial_weights(join)
    for index, expect in ((0, 5.0), (1, 0.0)):
        learner = SimpleNamespace(incarnation_index=index, setup=SimpleNamespace(init_params=lambda: init))
        mutant(learner, True)
        assert float(learner.params["w"][0]) == expect and float(learner.base["w"][0]) == expect


def test_data_replayed_keys_a_restarted_incarnation_as_the_first() -> None:
    from trainer.config import RunConfig
    from trainer.training import TrainingSetup

    setup = TrainingSetup.from_config(RunConfig())
    m = MUTANTS_BY_NAME["shell_data_replayed"]
    calls: list[str] = []
    with m.patched(observe=calls.append):
        first, rejoined = setup.batches("learner-1", 0).stream, setup.batches("learner-1", 2).stream
    assert first == setup.batches("learner-1", 0).stream  # incarnation 0: the stream it always was
    assert rejoined == first != setup.batches("learner-1", 2).stream  # incarnation 2: the first one's, replayed
    assert calls == ["trainer.training.TrainingSetup.batches"] * 2  # what a child records as called


def test_restore_mutants_leave_a_fresh_start_alone_and_change_a_restore(tmp_path: Path) -> None:
    from trainer.checkpoint import load_latest, save_checkpoint

    previous, dropped = _load_previous_checkpoint(load_latest), _load_without("merged_keys")(load_latest)
    assert previous(tmp_path) is None and dropped(tmp_path) is None  # a fault-free run's one start
    assert _no_version_skip(lambda every, unreadable=0: every)(20, 1) == 0
    for merges in (10, 20, 30):
        save_checkpoint(
            tmp_path,
            {"param/w": np.full(1, merges, np.float32)},
            {"versions": [merges], "merges_total": merges, "merged_keys": [["a", "b", 1, 2, 3]]},
        )
    found, kept, latest = previous(tmp_path), dropped(tmp_path), load_latest(tmp_path)
    assert found is not None and kept is not None and latest is not None
    assert found[2].name == "ckpt-0000000020.npz" != latest[2].name
    assert "merged_keys" not in kept[1] and "merged_keys" in latest[1]


# ---- the hook in a child process (plant and watch) ----------------------------------------------------------------


def test_a_unit_started_with_the_backends_environment_runs_the_mutant(tmp_path: Path) -> None:
    """The environment trainer.launch.LocalCluster gives a unit carries the mutant (it copies os.environ) while
    in_children is entered, and not after; the child applies the mutant's patches and records them."""
    from trainer.config import RunConfig
    from trainer.launch import LocalCluster

    cluster = LocalCluster(RunConfig(), tmp_path / "run")
    log = tmp_path / "mutant.jsonl"
    with real.in_children("shell_data_replayed", log):
        env = cluster._env("token")
    assert real.ENV_MUTANT not in cluster._env("token")  # restored: later units run unmutated
    assert str(real.INJECT_DIR) in env["PYTHONPATH"].split(os.pathsep)
    # A learner that stops at its argument parser: started, patched, recorded, exited as -m would.
    done = subprocess.run(
        [sys.executable, "-m", "trainer.learner", "--help"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "usage: python -m trainer.learner" in done.stdout, done.stderr
    [applied] = [r for r in real.records(log) if r["event"] == "applied"]
    assert applied["pid"] != os.getpid() and applied["module"] == "trainer.learner"
    assert applied["patched"] == {
        "trainer.training.TrainingSetup.batches": "_stream_of_first_incarnation.<locals>.mutant"
    }


def test_a_child_refuses_a_mutant_that_is_not_for_real_processes(tmp_path: Path) -> None:
    log = tmp_path / "mutant.jsonl"
    env = real.child_env("wake_missing", log, {**os.environ, "PYTHONPATH": str(ROOT)})
    done = subprocess.run(
        [sys.executable, "-m", "trainer.syncer", "--help"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == real.REFUSED_EXIT, done.stderr
    assert [r["event"] for r in real.records(log)] == ["refused"]


def test_the_nightly_pairs_a_scenarios_mutants() -> None:
    """Sorted by id (the rotation's order), each scenario's real mutants sit side by side: a night's two share a
    scenario's unmutated run where they can."""
    labels = [m.scenarios[0].label for m in MEMBERS]
    assert [member_id(m) for m in MEMBERS] == sorted(member_id(m) for m in MEMBERS)
    for label in set(labels):
        at = [i for i, x in enumerate(labels) if x == label]
        assert at == list(range(at[0], at[-1] + 1)), f"{label}'s mutants are not side by side: {labels}"
