"""The merge audit on real processes: a real syncer and learners over gRPC record every merge; the independent numpy
reference recomputes them and every digest chains (merges, checkpoints, uploads, the values learners hold). A
hand-corrupted run directory fails, naming the merge (the check's negative controls)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from chaos.audit_files import AuditFiles, reexecution_inputs
from chaos.checkers import CheckInput, RunFacts
from chaos.checkers.audit import check_audit
from chaos.checkers.ledger import check_ledger
from chaos.history import History
from chaos.scenario import Checks
from tests.integration.tiny_runs import KEEP_AUDIT, TINY, TinyRuns
from trainer.audit_log import AUDIT_DIR
from trainer.config import load_config

pytestmark = pytest.mark.integration
LEARNERS = ("learner-0", "learner-1", "learner-2")


def _audit(run_dir: Path, *sets: str, replay: bool = False):
    cfg = load_config(TINY, [KEEP_AUDIT, *sets])
    facts, history = RunFacts.of_config(cfg, LEARNERS), History.read(run_dir)
    initial, final = reexecution_inputs(cfg, history, run_dir) if replay else ({}, {})
    inp = CheckInput(
        history,
        facts,
        Checks(),
        None,
        audit_files=AuditFiles(run_dir),
        initial_params=initial,
        final_checkpoint=final,
    )
    return check_audit(inp)


@pytest.fixture(scope="module")
def decoupled_run(tiny_run: TinyRuns) -> Path:
    return tiny_run("decoupled").run_dir  # the config's own budget, every merge's audit files kept


def test_every_merge_of_a_real_run_is_recomputed_and_chained(decoupled_run: Path) -> None:
    v = _audit(decoupled_run)
    assert v.status == "pass", v
    assert v.evidence["recomputed"] == v.evidence["merges"] >= 20, v.evidence
    assert v.evidence["learner_values"] > v.evidence["merges"], (
        v.evidence
    )  # applies and state fetches, all matched


def test_a_real_run_replays_from_its_config_to_its_final_checkpoint(decoupled_run: Path) -> None:
    """Whole-run re-execution on real processes: the config's initial parameters (JAX's init, as every unit derives
    it) and the recorded uploads alone reach the final checkpoint the syncer wrote, float32 round-off apart."""
    v = _audit(decoupled_run, replay=True)
    replayed = v.evidence["reexecution"]
    assert v.status == "pass" and replayed["ran"] and replayed["merges"] == v.evidence["merges"], replayed
    damaged = _audit(decoupled_run, "seed=1", replay=True)  # another seed's initial parameters: not this run's
    assert damaged.status == "fail" and "does not reach the final checkpoint" in damaged.summary, damaged.summary


def test_the_ledgers_of_a_real_run_balance(decoupled_run: Path) -> None:
    """The token and data ledgers on real processes: every uploaded token accounted for, the learners' books
    agreeing with the syncer's, each learner on its own data stream from its start."""
    facts = RunFacts.of_config(load_config(TINY), LEARNERS)
    v = check_ledger(CheckInput(History.read(decoupled_run), facts, Checks(), None))
    assert v.status == "pass", v
    data, syncer = v.evidence["data"], v.evidence["syncer"]
    assert isinstance(data, dict) and isinstance(syncer, dict), v.evidence
    assert data["streams"] == 3 and data["positions"] > 10, v.evidence
    assert syncer["merged"] > 0 and v.evidence["budget"], v.evidence


def _corrupted(run_dir: Path, tmp_path: Path, part: str) -> tuple[Path, str]:
    """A copy of the run directory with one element of ``part`` changed in the middle kept merge's file."""
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    files = sorted((copy / AUDIT_DIR).glob("*.npz"))
    victim = files[len(files) // 2]
    with np.load(victim) as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in sorted(arrays) if k.startswith(part + "/"))
    arrays[name] = arrays[name].copy()
    arrays[name].flat[0] += 1e-3
    with open(victim, "wb") as f:
        np.savez(f, **arrays)
    return copy, victim.name


@pytest.mark.parametrize("part", ["result", "upload/0", "opt_after"])
def test_a_hand_corrupted_audit_file_fails_naming_the_merge(
    decoupled_run: Path, tmp_path: Path, part: str
) -> None:
    copy, victim = _corrupted(decoupled_run, tmp_path, part)
    v = _audit(copy)
    assert v.status == "fail", v
    assert victim in v.summary and "merge " in v.summary, v.summary


def test_a_kept_file_gone_fails_naming_it(decoupled_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(decoupled_run, copy)
    victim = sorted((copy / AUDIT_DIR).glob("*.npz"))[3]
    victim.unlink()
    v = _audit(copy)
    assert v.status == "fail" and victim.name in v.summary, v


def test_a_learner_holding_other_bits_fails(decoupled_run: Path, tmp_path: Path) -> None:
    """An ``apply`` whose digest is not the syncer's value of that version (a learner that applied wrong bits)."""
    copy = tmp_path / "copy"
    shutil.copytree(decoupled_run, copy)
    path = copy / "events" / "learner-1.jsonl"
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if '"kind":"apply"' in line)
    lines[i] = lines[i].replace('"digest":"', '"digest":"0', 1)
    path.write_text("\n".join(lines) + "\n")
    v = _audit(copy)
    assert v.status == "fail" and "learner-1 holds a fragment" in v.summary, v


@pytest.mark.parametrize("mode", ["sync-diloco", "data-parallel"])
def test_the_synchronous_baselines_pass_the_audit(tiny_run: TinyRuns, mode: str) -> None:
    run = tiny_run(mode)
    v = _audit(run.run_dir, *run.sets)
    assert v.status == "pass" and v.evidence["recomputed"] > 0, v
