"""``diloco-chaos collect k8s``: gather a cluster run into a run directory with kubectl (the I/O shell around
:mod:`chaos.k8s.collect`).

    RUN_DIR/scenario.json      copied from the export directory
    RUN_DIR/events/*.jsonl     each pod's events (kubectl cp from /data/run/events)
    RUN_DIR/audit/*.npz        the merges the syncer kept whole (the merge audit's, /data/run/audit)
    RUN_DIR/controller.jsonl   the faults' history, from Chaos Mesh's records
    RUN_DIR/k8s/*.json         the Workflow, its nodes and chaos objects as kubectl printed them (evidence)

Then ``diloco-chaos report RUN_DIR`` judges it. The conversion it relies on is tested per change
(tests/unit/test_k8s_collect.py); the whole path runs on a real cluster in the cluster tier (scripts/cluster-test).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from chaos.errors import ChaosError
from chaos.k8s.chaos_mesh import pod_of, workflow_name
from chaos.k8s.collect import WORKFLOW_LABEL, Obj, controller_records
from chaos.k8s.manifests import RUN_DIR
from chaos.scenario import Scenario, parse_scenario
from faults.base import SYNCER
from trainer import events as ev
from trainer.audit_log import AUDIT_DIR
from trainer.config import learner_ids

CHAOS_KINDS = "podchaos,networkchaos,stresschaos"


def _kubectl(kubectl: str, *args: str) -> str:
    try:
        done = subprocess.run([kubectl, *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ChaosError(f"no {kubectl!r} on PATH: install kubectl, or pass --kubectl PATH") from None
    if done.returncode != 0:
        raise ChaosError(f"kubectl {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _get(kubectl: str, namespace: str, *args: str) -> Obj:
    return json.loads(_kubectl(kubectl, "get", "-n", namespace, "-o", "json", *args))


def copy_order(num_learners: int) -> list[str]:
    """Whose events to copy, in order: every learner's, then the syncer's.

    Pods keep running while they are copied (a learner a fault held down may come back after the result is fixed),
    so the copy is a cut, and this order makes it consistent for what the ledger matches: the syncer logs a refusal
    or an accepted upload before it answers, so every answer a copied learner log holds is in the syncer's, copied
    after it; and once the result is fixed the syncer accepts nothing a learner copied earlier could miss. Copied
    syncer first, a learner told ``finished`` between the two copies was a refusal the syncer "never recorded"
    (seen on the real cluster: never-rejoins' ledger).

    >>> copy_order(2)
    ['learner-0', 'learner-1', 'syncer']
    """
    return [*learner_ids(num_learners), SYNCER]


def unsettled(run_dir: Path) -> str | None:
    """Why the copy in ``run_dir`` may not be a consistent cut (:func:`copy_order`), or None: the syncer's history
    holds its ``finished`` event, so it accepted nothing after the learners' copies were taken."""
    path = run_dir / "events" / f"{SYNCER}.jsonl"
    if path.exists() and any(isinstance(e, ev.Finished) for e in ev.read_events(path, strict=False)):
        return None
    return (
        "the syncer had not fixed the run's result (no `finished` event) when it was collected: an upload it "
        "accepted between the learners' copies and its own has no sync_start in them, which the ledger reports as "
        "a problem — collect again once training has reached its token budget"
    )


def gather(export_dir: Path, run_dir: Path, namespace: str, kubectl: str = "kubectl") -> Scenario:
    scenario_file = export_dir / "scenario.json"
    if not scenario_file.exists():
        raise ChaosError(f"{export_dir}: no scenario.json; pass the directory `diloco-chaos export k8s` wrote")
    scenario = parse_scenario(json.loads(scenario_file.read_text()), str(scenario_file))
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ChaosError(f"{run_dir} is not empty; choose a new run directory")
    name = workflow_name(scenario)
    selector = f"{WORKFLOW_LABEL}={name}"
    flow = _get(kubectl, namespace, "workflow", name)
    nodes = _get(kubectl, namespace, "workflownodes", "-l", selector)["items"]
    chaos = _get(kubectl, namespace, CHAOS_KINDS, "-l", selector)["items"]
    events = _get(kubectl, namespace, "events")["items"]  # what Chaos Mesh said of the chaos objects it deleted
    records = controller_records(scenario, flow, nodes, chaos, events)
    (run_dir / "events").mkdir(parents=True)
    (run_dir / "k8s").mkdir()
    for label, obj in (("workflow", flow), ("workflownodes", nodes), ("chaos", chaos), ("events", events)):
        (run_dir / "k8s" / f"{label}.json").write_text(json.dumps(obj, indent=2))
    for unit in copy_order(scenario.cluster.algorithm.num_learners):  # each pod's volume: its events
        _kubectl(
            kubectl,
            "cp",
            f"{namespace}/{pod_of(unit)}:{RUN_DIR}/events/{unit}.jsonl",
            str(run_dir / "events" / f"{unit}.jsonl"),
        )
    # The merges the syncer kept whole, for the merge audit to recompute (without them it can only chain digests).
    _kubectl(kubectl, "cp", f"{namespace}/{pod_of(SYNCER)}:{RUN_DIR}/{AUDIT_DIR}", str(run_dir / AUDIT_DIR))
    shutil.copy(scenario_file, run_dir / "scenario.json")
    (run_dir / "controller.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return scenario
