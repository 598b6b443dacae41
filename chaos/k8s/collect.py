"""A cluster run as a run directory: Chaos Mesh's own record of each fault becomes the controller's history.

After a run on Kubernetes, the trainer's events are on the pods' volumes and the faults' times are in Chaos
Mesh's objects: every chaos object the Workflow created (labelled ``chaos-mesh.org/workflow``, and
``chaos-mesh.org/controlled-by`` its WorkflowNode, whose ``spec.templateName`` is the fault's template)
records, per selected pod, each ``Apply`` and ``Recover`` with its outcome and time (faults the Workflow runs as
``kubectl exec`` steps are timed by their WorkflowNodes' start). :func:`controller_records`
turns those into the records the compose and local controllers write (:mod:`chaos.history`): the plan, the
steady phase (the Workflow's creation: it is applied once training is steady), each fault's inject and heal,
and a teardown that lists any fault Chaos Mesh did not recover. Then ``diloco-chaos report`` judges the
directory with the same checkers. ``diloco-chaos collect k8s`` (:mod:`chaos.k8s.gather`) gathers the
objects and the events with kubectl.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chaos.errors import ChaosError
from chaos.fault_plan import Planned, plan
from chaos.history import ControllerRecord, FaultOp, Phase, PlanRecord, Teardown, TeardownPhase
from chaos.k8s.chaos_mesh import EXEC_KINDS, template_name
from chaos.scenario import Scenario

WORKFLOW_LABEL = "chaos-mesh.org/workflow"
NODE_LABEL = "chaos-mesh.org/controlled-by"
Obj = dict[str, Any]  # a Kubernetes object as `kubectl get -o json` prints it


def _ts(stamp: str) -> float:
    """RFC 3339 (Kubernetes' metav1.Time) to Unix seconds.

    >>> _ts("2026-12-03T06:00:00Z")
    1796277600.0
    """
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _events(chaos: Obj) -> list[tuple[float, str, str, str]]:
    """(time, Apply/Recover, Succeeded/Failed, message) of every selected pod, in time order."""
    out = []
    for record in chaos.get("status", {}).get("experiment", {}).get("containerRecords") or []:
        for e in record.get("events") or []:
            out.append((_ts(e["timestamp"]), e["operation"], e["type"], e.get("message", "")))
    return sorted(out)


def _exec_records(planned: list[Planned], nodes: list[Obj], not_recovered: list[str]) -> list[ControllerRecord]:
    """Faults the Workflow runs as kubectl exec steps (pause, corrupt, slow, reset_peer, data_limit: no chaos
    object records them): the inject and heal are when their WorkflowNodes started; slow's heal is its start plus
    its duration (the duty cycle runs that long in the pod)."""
    started = {n["spec"]["templateName"]: _ts(n["spec"]["startTime"]) for n in nodes if n["spec"].get("startTime")}
    out: list[ControllerRecord] = []
    for p in planned:
        if p.kind not in EXEC_KINDS:
            continue
        name = template_name(p.fault_id, planned)
        inject = started.get(name if p.kind == "slow" else f"{name}-inject")
        if p.kind == "slow":
            heal = inject + p.duration if inject is not None else None
        else:
            heal = started.get(f"{name}-heal")
        evidence = {"workflow_node": name}
        for ts, action in ((inject, "inject"), (heal, "heal")):
            if ts is not None:
                out += [FaultOp(ts=ts, fault_id=p.fault_id, fault_kind=p.kind, action=action, outcome=o,
                                targets=list(p.targets), params=p.params, evidence=evidence) for o in ("invoke", "ok")]
        if inject is not None and heal is None:
            not_recovered.append(p.fault_id)
    return out


def controller_records(scenario: Scenario, workflow: Obj, nodes: list[Obj], chaos: list[Obj]) -> list[ControllerRecord]:
    """The controller's history of a cluster run, from the Workflow, its nodes and the chaos objects it made."""
    planned = plan(scenario)
    by_template: dict[str, Planned] = {template_name(p.fault_id, planned): p for p in planned}
    node_template = {n["metadata"]["name"]: n["spec"]["templateName"] for n in nodes}
    steady = _ts(workflow["metadata"]["creationTimestamp"])
    records: list[ControllerRecord] = [
        PlanRecord(ts=steady, scenario=scenario.name, seed=scenario.seed, faults=[p.record() for p in planned]),
        Phase(ts=steady, name="bring_up", detail={"backend": "k8s", "workflow": workflow["metadata"]["name"]}),
        Phase(ts=steady, name="steady", detail={"from": "the Workflow's creation"})]
    not_recovered: list[str] = []
    for obj in chaos:
        node = obj["metadata"].get("labels", {}).get(NODE_LABEL, "")
        p = by_template.get(node_template.get(node, ""))
        if p is None:
            raise ChaosError(f"{obj['kind']} {obj['metadata']['name']!r}: its WorkflowNode {node!r} is not one of "
                             f"scenario {scenario.name}'s faults; collect the Workflow exported from this scenario")
        events = _events(obj)

        def op(ts: float, action: str, outcome: str, error: str = "", p: Planned = p) -> FaultOp:
            return FaultOp(ts=ts, fault_id=p.fault_id, fault_kind=p.kind, action=action, outcome=outcome,
                           targets=list(p.targets), params=p.params, error=error,
                           evidence={"chaos": f"{obj['kind']}/{obj['metadata']['name']}"})

        applied = [e for e in events if e[1] == "Apply"]
        if applied:
            ts, _, kind, message = applied[0]
            records.append(op(ts, "inject", "invoke"))
            records.append(op(ts, "inject", "ok") if kind == "Succeeded" else op(ts, "inject", "fail", message))
        recovered = [e for e in events if e[1] == "Recover" and e[2] == "Succeeded"]
        if recovered:
            records += [op(recovered[-1][0], "heal", "invoke"), op(recovered[-1][0], "heal", "ok")]
        elif applied:
            not_recovered.append(p.fault_id)
    records += _exec_records(planned, nodes, not_recovered)
    end = max((r.ts for r in records), default=steady)
    records.append(TeardownPhase(ts=end, detail=Teardown(
        problems=[f"Chaos Mesh recorded no recovery of {f}" for f in not_recovered])))
    return sorted(records, key=lambda r: r.ts)
