"""The parity band: the fault-free runs a scenario's final loss is judged against, one per cluster seed.

Shared by the controller, which runs them itself (and caches them), and ``diloco-chaos report --baseline``, which
takes runs made elsewhere — on Kubernetes, each exported with ``export k8s --fault-free K`` and gathered with
``collect k8s`` (scripts/cluster-test). Run k of the band is the scenario's cluster at seed ``seed + k`` with no
fault (:meth:`chaos.scenario.Scenario.fault_free`); run 0 is the baseline the report names, the others its
``runs``.
"""

from __future__ import annotations

import json
from pathlib import Path

from chaos.checkers.goodput import compute_goodput
from chaos.checkers.parity import band_origin
from chaos.errors import ChaosError
from chaos.history import History
from chaos.run_report import Band, Baseline
from chaos.scenario import Scenario, parse_scenario
from trainer.metrics import RunMetrics, summarize_run


def record(m: RunMetrics, run_dir: Path, config_hash: str, cached: bool) -> Baseline:
    """One fault-free run's record: its final loss and entropy floor, where it ran."""
    return Baseline(
        final_eval_loss=m.final_eval_loss,
        loss_floor=m.loss_floor,
        run_dir=str(run_dir),
        cached=cached,
        config_hash=config_hash,
    )


def _goodput(run: Baseline, num_fragments: int) -> float | None:
    """A fault-free run's compute goodput, read off its history (None: its directory is gone or nobody trained)."""
    if not run.run_dir or not Path(run.run_dir).is_dir():
        return None
    return compute_goodput(History.read(Path(run.run_dir)).events, num_fragments)


def band(runs: list[Baseline], num_fragments: int) -> Baseline:
    """The band's first run's record, plus ``band``: every seed's final loss, entropy floor and excess over that
    floor (what parity judges against: each seed draws its own Markov source, so raw losses differ by the task,
    not only by noise) and goodput, and ``runs``: the other seeds' records. Each run carries its ``seed``."""
    losses = [r.final_eval_loss for r in runs]
    floors = [r.loss_floor for r in runs]
    goodputs = [_goodput(r, num_fragments) for r in runs]
    b = Band(
        seeds=[r.seed for r in runs if r.seed is not None],
        losses=losses,
        floors=floors,
        excess=[loss - band_origin(f) for loss, f in zip(losses, floors, strict=True)],
        goodputs=[g for g in goodputs if g is not None] if None not in goodputs else [],
    )
    return runs[0].model_copy(update={"band": b, "runs": runs[1:]})


def from_run_dirs(scenario: Scenario, run_dirs: list[Path]) -> Baseline:
    """The band of fault-free runs made elsewhere, in order (run k at cluster seed ``seed + k``), each checked to be
    what the band needs: the scenario's cluster at that seed with no fault, trained to its token budget."""
    want = scenario.checks.parity.baseline_seeds
    if len(run_dirs) != want:
        raise ChaosError(
            f"{len(run_dirs)} baseline run(s) given; the scenario's parity band has {want} "
            f"(checks.parity.baseline_seeds): pass one --baseline per seed, in order"
        )
    runs = []
    for k, run_dir in enumerate(run_dirs):
        expected = scenario.fault_free(k)
        spath = run_dir / "scenario.json"
        if not spath.exists():
            raise ChaosError(
                f"baseline {run_dir}: no scenario.json; pass a run directory (collect k8s writes one)"
            )
        theirs = parse_scenario(json.loads(spath.read_text()), str(spath))
        key = expected.cluster.config_hash()
        if theirs.cluster.config_hash() != key or theirs.schedule or theirs.random is not None:
            raise ChaosError(
                f"baseline {run_dir}: not {scenario.name}'s fault-free run {k} (its cluster at seed "
                f"{expected.cluster.seed}, no faults); export that one with `export k8s {scenario.name} "
                f"--fault-free {k}`"
            )
        m = summarize_run(run_dir)
        if not m.final_eval_is_final:
            raise ChaosError(f"baseline {run_dir}: it did not reach its token budget (no final eval)")
        runs.append(record(m, run_dir, key, cached=False).model_copy(update={"seed": expected.cluster.seed}))
    return band(runs, scenario.cluster.algorithm.num_fragments)
