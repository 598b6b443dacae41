"""A cluster run as a run directory: Chaos Mesh's own record of each fault becomes the controller's history.

After a run on Kubernetes, the trainer's events are on the pods' volumes and the faults' times are in Chaos
Mesh's objects: every chaos object the Workflow created (labelled ``chaos-mesh.org/workflow``, and
``chaos-mesh.org/controlled-by`` its WorkflowNode, whose ``spec.templateName`` is the fault's template)
records, per selected pod, each ``Apply`` and ``Recover`` with its outcome and time (faults the Workflow runs as
``kubectl exec`` steps are timed by their WorkflowNodes' start, and judged by their Task pods' exit codes, which
Chaos Mesh keeps in each Task node's status). :func:`controller_records`
turns those into the records the compose and local controllers write (:mod:`chaos.history`): the plan, the
steady phase (the Workflow's creation: it is applied once training is steady), each fault's inject and heal,
and a teardown that lists any fault Chaos Mesh did not recover. Then ``diloco-chaos report`` judges the
directory with the same checkers. ``diloco-chaos collect k8s`` (:mod:`chaos.k8s.gather`) gathers the
objects and the events with kubectl.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from chaos.errors import ChaosError
from chaos.fault_plan import Planned, plan
from chaos.history import (
    ControllerRecord,
    FaultOp,
    NotRun,
    NotRunPhase,
    Phase,
    PlanRecord,
    Teardown,
    TeardownPhase,
)
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


# A Kubernetes Event's reason (Chaos Mesh's recorder) as a chaos record's operation and outcome.
EVENT_OPERATIONS = {"Applied": ("Apply", "Succeeded"), "Recovered": ("Recover", "Succeeded")}


def _from_events(node: Obj, events: list[Obj]) -> Obj | None:
    """The chaos object ``node`` created, re-told from the Kubernetes Events Chaos Mesh wrote for it.

    Chaos Mesh deletes a WorkflowNode's chaos object when the node's deadline passes, so after the Workflow
    has finished its per-pod records are gone (seen on a real cluster: scripts/cluster-test); the Events it wrote
    for the object (``Applied`` / ``Recovered`` per pod, ``Failed`` with "apply" or "recover" in the message)
    outlive it, kept an hour by default. None: the node made no chaos object, or no Event of it is left.
    """
    ref = (node.get("status") or {}).get("chaosResource") or {}
    if not ref.get("name"):
        return None
    records = []
    for e in events:
        io = e.get("involvedObject") or {}
        if io.get("kind") != ref.get("kind") or io.get("name") != ref["name"]:
            continue
        stamp = e.get("lastTimestamp") or e.get("firstTimestamp") or e.get("eventTime")
        message = e.get("message") or ""
        op = EVENT_OPERATIONS.get(e.get("reason", ""))
        if op is None and e.get("reason") == "Failed":
            op = next(
                ((o, "Failed") for word, o in (("apply", "Apply"), ("recover", "Recover")) if word in message),
                None,
            )
        if op and stamp:
            records.append({"timestamp": stamp, "operation": op[0], "type": op[1], "message": message})
    if not records:
        return None
    return {
        "kind": ref.get("kind", ""),
        "metadata": {"name": ref["name"], "labels": {NODE_LABEL: node["metadata"]["name"]}},
        "status": {"experiment": {"containerRecords": [{"events": records}]}},
    }


def _task_failures(nodes: list[Obj], step: str) -> list[str]:
    """What went wrong in the exec Tasks of ``step`` (a Parallel whose Tasks are ``step-0``, ``step-1``, ...).

    Chaos Mesh puts a finished Task pod's exit code and output in its node's
    ``status.conditionalBranchesStatus.context`` (JSON); a Task past its deadline without them did not finish.
    A Task still running when collected is no failure yet.
    """
    task = re.compile(re.escape(step) + r"-\d+")
    failures = []
    for n in nodes:
        name = n["spec"]["templateName"]
        if not task.fullmatch(name):
            continue
        status = n.get("status") or {}
        context = (status.get("conditionalBranchesStatus") or {}).get("context") or []
        if context:
            result = json.loads(context[0])
            code = result.get("exitCode", 0)
            if code != 0:
                out = " ".join(str(result.get("stdout", "")).split())[-300:]
                failures.append(f"{name}: exit {code}" + (f": {out}" if out else ""))
        elif any(
            c.get("type") == "DeadlineExceed" and c.get("status") == "True" for c in status.get("conditions") or []
        ):
            failures.append(f"{name}: no result within its deadline")
    return sorted(failures)


def _exec_records(planned: list[Planned], nodes: list[Obj], not_recovered: list[str]) -> list[ControllerRecord]:
    """Faults the Workflow runs as kubectl exec steps (pause, corrupt, slow, reset_peer, data_limit: no chaos
    object records them): the inject and heal are when their WorkflowNodes started, and failed when one of their
    Tasks did (:func:`_task_failures`); slow's heal is its start plus its duration (the duty cycle runs that long
    in the pod, and ends it running)."""
    started = {n["spec"]["templateName"]: _ts(n["spec"]["startTime"]) for n in nodes if n["spec"].get("startTime")}
    out: list[ControllerRecord] = []
    for p in planned:
        if p.kind not in EXEC_KINDS:
            continue
        name = template_name(p.fault_id, planned)
        steps = {"inject": name if p.kind == "slow" else f"{name}-inject", "heal": f"{name}-heal"}
        inject = started.get(steps["inject"])
        if p.kind == "slow":
            heal = inject + p.duration if inject is not None else None
        else:
            heal = started.get(steps["heal"])
        evidence = {"workflow_node": name}
        healed = False
        for ts, action in ((inject, "inject"), (heal, "heal")):
            if ts is None:
                continue
            failed = _task_failures(nodes, steps[action]) if (action, p.kind) != ("heal", "slow") else []
            out.append(
                FaultOp(
                    ts=ts,
                    fault_id=p.fault_id,
                    fault_kind=p.kind,
                    action=action,
                    outcome="invoke",
                    targets=list(p.targets),
                    params=p.params,
                    evidence=evidence,
                )
            )
            out.append(
                FaultOp(
                    ts=ts,
                    fault_id=p.fault_id,
                    fault_kind=p.kind,
                    action=action,
                    outcome="fail" if failed else "ok",
                    error="; ".join(failed),
                    targets=list(p.targets),
                    params=p.params,
                    evidence=evidence,
                )
            )
            healed = action == "heal" and not failed
        if inject is not None and not healed:
            not_recovered.append(p.fault_id)
    return out


def controller_records(
    scenario: Scenario, workflow: Obj, nodes: list[Obj], chaos: list[Obj], k8s_events: list[Obj] | None = None
) -> list[ControllerRecord]:
    """The controller's history of a cluster run, from the Workflow, its nodes and the chaos objects it made (those
    Chaos Mesh already deleted re-told from the namespace's Events, ``k8s_events``: :func:`_from_events`). A planned fault with
    no record at all is listed as not run."""
    planned = plan(scenario)
    present = {o["metadata"]["name"] for o in chaos}
    chaos = chaos + [
        told
        for n in nodes
        if ((n.get("status") or {}).get("chaosResource") or {}).get("name") not in present
        and (told := _from_events(n, k8s_events or [])) is not None
    ]
    by_template: dict[str, Planned] = {template_name(p.fault_id, planned): p for p in planned}
    node_template = {n["metadata"]["name"]: n["spec"]["templateName"] for n in nodes}
    steady = _ts(workflow["metadata"]["creationTimestamp"])
    records: list[ControllerRecord] = [
        PlanRecord(ts=steady, scenario=scenario.name, seed=scenario.seed, faults=[p.record() for p in planned]),
        Phase(ts=steady, name="bring_up", detail={"backend": "k8s", "workflow": workflow["metadata"]["name"]}),
        Phase(ts=steady, name="steady", detail={"from": "the Workflow's creation"}),
    ]
    not_recovered: list[str] = []
    for obj in chaos:
        node = obj["metadata"].get("labels", {}).get(NODE_LABEL, "")
        p = by_template.get(node_template.get(node, ""))
        if p is None:
            raise ChaosError(
                f"{obj['kind']} {obj['metadata']['name']!r}: its WorkflowNode {node!r} is not one of "
                f"scenario {scenario.name}'s faults; collect the Workflow exported from this scenario"
            )
        events = _events(obj)

        def op(ts: float, action: str, outcome: str, error: str = "", p: Planned = p, obj: dict = obj) -> FaultOp:
            return FaultOp(
                ts=ts,
                fault_id=p.fault_id,
                fault_kind=p.kind,
                action=action,
                outcome=outcome,
                targets=list(p.targets),
                params=p.params,
                error=error,
                evidence={"chaos": f"{obj['kind']}/{obj['metadata']['name']}"},
            )

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
    started = {r.fault_id for r in records if isinstance(r, FaultOp) and r.action == "inject"}
    missing = [p.fault_id for p in planned if p.fault_id not in started]
    end = max((r.ts for r in records), default=steady)
    if missing:  # as the local controller records a fault the run ended before (chaos.history.NotRun)
        records.append(NotRunPhase(ts=end, detail=NotRun(faults=missing)))
    records.append(
        TeardownPhase(
            ts=end, detail=Teardown(problems=[f"Chaos Mesh recorded no recovery of {f}" for f in not_recovered])
        )
    )
    return sorted(records, key=lambda r: r.ts)
