"""chaos.k8s.collect: Chaos Mesh's records of a cluster run become the controller's history, and a run directory
gathered that way is judged by the same checkers (deterministic mode's run, its faults re-told by Chaos Mesh)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis import analyse
from chaos.errors import ChaosError
from chaos.fault_plan import plan
from chaos.history import ControllerRecord, FaultOp, History, NotRunPhase, Teardown, TeardownPhase
from chaos.k8s.chaos_mesh import EXEC_KINDS, template_name, workflow
from chaos.k8s.collect import NODE_LABEL, WORKFLOW_LABEL, controller_records
from chaos.scenario import builtin_scenarios, load_scenario, scenario_with
from chaos.sim import simulate


def _given(t: float | None) -> float:
    """A fault window's end: the runs here heal every fault."""
    assert t is not None
    return t


def _teardown(records: list[ControllerRecord]) -> Teardown:
    """What the controller records' last, the teardown phase, says."""
    last = records[-1]
    assert isinstance(last, TeardownPhase), last
    return last.detail


def _stamp(ts: float) -> str:
    """As Kubernetes writes a metav1.Time: whole seconds (Chaos Mesh's event times are no finer)."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def chaos_mesh_objects(scenario, windows: dict[str, tuple[float, float]], steady: float):
    """What Chaos Mesh would hold after running the exported Workflow with these fault windows: the Workflow,
    one WorkflowNode per fault template, and the chaos object each made, with its per-pod Apply/Recover events."""
    flow = workflow(scenario).manifest()
    flow["metadata"]["creationTimestamp"] = _stamp(steady)
    name = flow["metadata"]["name"]
    planned = plan(scenario)
    nodes, chaos = [], []
    templates = {t["name"]: t for t in flow["spec"]["templates"]}
    for p in planned:
        tname = template_name(p.fault_id, planned)
        t = templates[tname]
        start, end = windows[p.fault_id]
        # exec steps have no chaos object: their WorkflowNodes' start times tell (slow: one; else in and out)
        steps = (
            ({tname: start} if p.kind == "slow" else {f"{tname}-inject": start, f"{tname}-heal": end})
            if p.kind in EXEC_KINDS
            else {tname: start}
        )
        nodes += [
            {
                "apiVersion": "chaos-mesh.org/v1alpha1",
                "kind": "WorkflowNode",
                "metadata": {"name": f"{step}-x7k2p", "labels": {WORKFLOW_LABEL: name}},
                "spec": {
                    "templateName": step,
                    "workflowName": name,
                    "type": templates[step]["templateType"],
                    "startTime": _stamp(at),
                },
            }
            for step, at in steps.items()
        ]
        # each exec step's Tasks, finished: Chaos Mesh keeps their pods' exit code and output in the node's status
        nodes += [
            {
                "apiVersion": "chaos-mesh.org/v1alpha1",
                "kind": "WorkflowNode",
                "metadata": {"name": f"{task}-q4m8s", "labels": {WORKFLOW_LABEL: name}},
                "spec": {"templateName": task, "workflowName": name, "type": "Task", "startTime": _stamp(at)},
                "status": {
                    "conditionalBranchesStatus": {
                        "branches": [],
                        "context": [json.dumps({"exitCode": 0, "stdout": ""})],
                    },
                    "conditions": [{"type": "Accomplished", "status": "True", "reason": ""}],
                },
            }
            for step, at in steps.items()
            if p.kind in EXEC_KINDS
            for task in templates[step]["children"]
        ]
        if p.kind in EXEC_KINDS:
            continue
        node = f"{tname}-x7k2p"
        field = next(k for k in t if k.endswith("Chaos"))
        pods = next(iter(t[field]["selector"]["pods"].values()))
        records = [
            {
                "id": f"diloco-chaos/{pod}",
                "selectorKey": ".",
                "phase": "Not Injected",
                "injectedCount": 1,
                "recoveredCount": 1,
                "events": [
                    {"type": "Succeeded", "operation": "Apply", "timestamp": _stamp(start)},
                    {"type": "Succeeded", "operation": "Recover", "timestamp": _stamp(end)},
                ],
            }
            for pod in pods
        ]
        chaos.append(
            {
                "apiVersion": "chaos-mesh.org/v1alpha1",
                "kind": t["templateType"],
                "metadata": {"name": f"{node}-chaos", "labels": {WORKFLOW_LABEL: name, NODE_LABEL: node}},
                "spec": t[field],
                "status": {"experiment": {"containerRecords": records}},
            }
        )
    return flow, nodes, chaos


@pytest.mark.parametrize("name", ["kill-and-rejoin", "corrupt-learner", "straggler", "random-mix"])
def test_a_simulated_run_retold_by_chaos_mesh_gets_the_same_fault_windows_and_verdicts(
    name: str, tmp_path: Path
) -> None:
    """A chaos object's records (kill), exec steps' WorkflowNodes (corrupt: in and out; slow: one that runs),
    and random-mix's mix of both (reset_peer in the netfault sidecar among them)."""
    s = load_scenario(builtin_scenarios()[name])
    sim_dir = tmp_path / "sim"
    original = simulate(s).write(sim_dir)
    h = History.read(sim_dir)
    windows = {w.fault_id: (w.start, _given(w.end)) for w in h.fault_windows()}  # every fault healed
    steady = h.phase("steady")
    assert steady is not None
    flow, nodes, chaos = chaos_mesh_objects(s, windows, steady.ts)

    cluster = tmp_path / "cluster"
    (cluster / "events").mkdir(parents=True)
    for f in (sim_dir / "events").glob("*.jsonl"):
        (cluster / "events" / f.name).write_bytes(f.read_bytes())
    shutil.copytree(sim_dir / "audit", cluster / "audit")  # what gather copies from the syncer's volume
    (cluster / "scenario.json").write_text(s.model_dump_json())
    (cluster / "controller.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in controller_records(s, flow, nodes, chaos))
    )

    back = {w.fault_id: w for w in History.read(cluster).fault_windows()}
    for w in h.fault_windows():  # to the second, as Chaos Mesh records them
        assert back[w.fault_id].targets == w.targets and w.start - 1 < back[w.fault_id].start <= w.start
        end, end_back = _given(w.end), _given(back[w.fault_id].end)
        assert end - 1 < end_back <= end
    judged = analyse(s, cluster, original.report.baseline)  # the same fault-free run to compare with
    assert {v.name: v.status for v in judged.verdicts} == {v.name: v.status for v in original.report.verdicts}
    assert judged.report.backend == "k8s" and judged.report.teardown.problems == []


def test_a_fault_chaos_mesh_never_recovered_is_a_teardown_problem() -> None:
    s = load_scenario(builtin_scenarios()["kill-and-rejoin"])
    flow, nodes, chaos = chaos_mesh_objects(s, {"f0": (100.0, 108.0)}, 97.0)
    for record in chaos[0]["status"]["experiment"]["containerRecords"]:
        record["events"] = record["events"][:1]  # applied, never recovered
    records = controller_records(s, flow, nodes, chaos)
    assert [r.action for r in records if isinstance(r, FaultOp)] == ["inject", "inject"]
    assert _teardown(records).problems == ["Chaos Mesh recorded no recovery of f0"]


def test_a_failed_apply_is_a_failed_inject_with_chaos_meshs_message() -> None:
    s = load_scenario(builtin_scenarios()["kill-and-rejoin"])
    flow, nodes, chaos = chaos_mesh_objects(s, {"f0": (100.0, 108.0)}, 97.0)
    chaos[0]["status"]["experiment"]["containerRecords"][0]["events"] = [
        {"type": "Failed", "operation": "Apply", "message": "pod not found", "timestamp": _stamp(100.0)}
    ]
    ops = [
        (r.action, r.outcome, r.error) for r in controller_records(s, flow, nodes, chaos) if isinstance(r, FaultOp)
    ]
    assert ops == [("inject", "invoke", ""), ("inject", "fail", "pod not found")]


def _task_node(nodes: list, template: str) -> dict:
    return next(n for n in nodes if n["spec"]["templateName"] == template)


def test_a_failed_exec_step_is_a_failed_inject_with_its_output_and_an_unfinished_heal_a_teardown_problem() -> None:
    """pause's exec Tasks: the inject's pod exited 1 (its output is the error); the heal's never finished."""
    s = scenario_with(
        "kill-one-learner",
        schedule=[{"fault": "pause", "id": "p", "targets": ["learner-0", "learner-2"], "at": 1, "duration": 4}],
    )
    flow, nodes, chaos = chaos_mesh_objects(s, {"p": (100.0, 104.0)}, 97.0)
    assert chaos == []
    failed = _task_node(nodes, "p-inject-1")["status"]
    failed["conditionalBranchesStatus"]["context"] = [
        json.dumps(
            {"exitCode": 1, "stdout": "error: no trainer process here (is the pod's process namespace shared?)\n"}
        )
    ]
    _task_node(nodes, "p-heal-0")["status"] = {
        "conditions": [{"type": "DeadlineExceed", "status": "True", "reason": ""}]
    }
    records = controller_records(s, flow, nodes, chaos)
    ops = [(r.action, r.outcome, r.error) for r in records if isinstance(r, FaultOp)]
    assert ops == [
        ("inject", "invoke", ""),
        (
            "inject",
            "fail",
            "p-inject-1: exit 1: error: no trainer process here (is the pod's process namespace shared?)",
        ),
        ("heal", "invoke", ""),
        ("heal", "fail", "p-heal-0: no result within its deadline"),
    ]
    assert _teardown(records).problems == ["Chaos Mesh recorded no recovery of p"]


def test_exec_steps_that_succeed_or_still_run_are_not_failures() -> None:
    """Negative control for the above: exit 0 everywhere is ok, and a Task still running (no result, no
    deadline passed) is not a failure yet."""
    s = scenario_with(
        "kill-one-learner",
        schedule=[{"fault": "pause", "id": "p", "targets": ["learner-0"], "at": 1, "duration": 4}],
    )
    flow, nodes, chaos = chaos_mesh_objects(s, {"p": (100.0, 104.0)}, 97.0)
    _task_node(nodes, "p-heal-0")["status"] = {}
    records = controller_records(s, flow, nodes, chaos)
    assert [(r.action, r.outcome) for r in records if isinstance(r, FaultOp)] == [
        ("inject", "invoke"),
        ("inject", "ok"),
        ("heal", "invoke"),
        ("heal", "ok"),
    ]
    assert _teardown(records).problems == []


def test_a_chaos_object_of_another_workflow_is_refused_by_name() -> None:
    s = load_scenario(builtin_scenarios()["kill-and-rejoin"])
    flow, nodes, chaos = chaos_mesh_objects(s, {"f0": (100.0, 108.0)}, 97.0)
    chaos[0]["metadata"]["labels"][NODE_LABEL] = "someone-elses-node"
    with pytest.raises(
        ChaosError, match="WorkflowNode 'someone-elses-node' is not one of scenario kill-and-rejoin"
    ):
        controller_records(s, flow, nodes, chaos)


def test_the_fixture_is_chaos_meshs_format() -> None:
    """The objects above are what tools/k8scheck decodes strictly (tests/integration/test_k8s_check.py)."""
    s = load_scenario(builtin_scenarios()["kill-and-rejoin"])
    _, _, chaos = chaos_mesh_objects(s, {"f0": (100.0, 108.0)}, 97.0)
    assert json.loads(json.dumps(chaos))[0]["kind"] == "PodChaos"


REAL = (
    Path(__file__).parents[1] / "data" / "k8s"
)  # what a real Chaos Mesh left of kill-and-rejoin (scripts/cluster-test)


def _real(name: str) -> Any:
    return json.loads((REAL / f"kill-and-rejoin-{name}.json").read_text())


def test_a_fault_whose_chaos_object_chaos_mesh_deleted_is_told_from_its_events():
    # At the node's deadline Chaos Mesh deletes the PodChaos, so after the Workflow the chaos list is empty; the
    # Events it wrote (Applied, Recovered: kept an hour) still say when the kill started and ended. Before, the
    # history had no inject at all and the report passed reintegration with "no fault took a learner out".
    s = scenario_with("kill-and-rejoin")
    records = controller_records(s, _real("workflow"), _real("workflownodes"), [], _real("events")["items"])
    ops = [(r.action, r.outcome, r.ts) for r in records if isinstance(r, FaultOp)]
    assert [(a, o) for a, o, _ in ops] == [
        ("inject", "invoke"),
        ("inject", "ok"),
        ("heal", "invoke"),
        ("heal", "ok"),
    ]
    assert ops[2][2] - ops[0][2] == s.schedule[0].duration  # 8 s, to Kubernetes' second
    assert not [r for r in records if isinstance(r, NotRunPhase)]


def test_a_planned_fault_with_no_record_at_all_is_not_run():
    s = scenario_with("kill-and-rejoin")
    records = controller_records(s, _real("workflow"), _real("workflownodes"), [], [])
    assert not [r for r in records if isinstance(r, FaultOp)]
    assert [r.detail.faults for r in records if isinstance(r, NotRunPhase)] == [["f0"]]


def test_a_copy_taken_before_the_result_was_fixed_is_flagged(tmp_path: Path) -> None:
    """collect's cut is consistent only once the syncer has fixed the result (chaos.k8s.gather.copy_order)."""
    from chaos.k8s.gather import unsettled

    s = scenario_with("kill-and-rejoin", cluster={"token_budget": 600_000})
    run = tmp_path / "run"
    simulate(s).write(run)
    assert unsettled(run) is None
    syncer = run / "events" / "syncer.jsonl"
    kept = [line for line in syncer.read_text().splitlines(keepends=True) if '"kind":"finished"' not in line]
    assert len(kept) < len(syncer.read_text().splitlines()), "the simulated syncer logged no finished event"
    syncer.write_text("".join(kept))
    assert "had not fixed the run's result" in (unsettled(run) or "")
    syncer.unlink()
    assert "had not fixed the run's result" in (unsettled(run) or "")
