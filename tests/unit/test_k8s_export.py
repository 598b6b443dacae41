"""chaos.k8s: every fault kind is mapped to Chaos Mesh or refused with its reason, and a scenario's faults survive
the mapping: read back from the Workflow, each fault's start, duration and targets are the plan's."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given

from chaos.errors import ScenarioError
from chaos.fault_plan import plan
from chaos.k8s.chaos_mesh import MAPPING, SYNCER_POD, UNSUPPORTED, template_name, workflow
from chaos.k8s.export import export
from chaos.k8s.manifests import ClusterOptions, cluster_objects
from chaos.k8s.netfault import NETFAULT_CONTAINER, data_limit_commands, reset_peer_commands
from chaos.k8s.objects import dump_all
from chaos.scenario import builtin_scenarios, load_scenario, scenario_with
from chaos.strategies import fault_schedules, to_scenario
from faults.kinds import KINDS

EXPORTABLE = sorted(MAPPING)


def _units(pods: list[str]) -> tuple[str, ...]:
    return tuple(sorted("syncer" if p == SYNCER_POD else p for p in pods))


def _exec_pods(templates: dict, parallel: dict) -> list[str]:
    """The pods a Parallel of exec Tasks runs in (kubectl exec -n NS POD ...)."""
    return [templates[c]["task"]["container"]["command"][4] for c in parallel["children"]]


def _read_back(manifest: dict) -> dict[str, tuple[float, float, tuple[str, ...], str]]:
    """Per fault template: (start s, duration s, targeted units, template type), from the Workflow alone."""
    templates = {t["name"]: t for t in manifest["spec"]["templates"]}
    entry = templates[manifest["spec"]["entry"]]
    out = {}
    for branch in entry["children"]:
        wait, fault = (templates[c] for c in templates[branch]["children"])
        start = int(wait["deadline"][:-2]) / 1000
        kind = fault["templateType"]
        if kind == "Serial":  # exec in, hold, exec out (pause, corrupt)
            inject, hold, _ = (templates[c] for c in fault["children"])
            duration, units = int(hold["deadline"][:-2]) / 1000, _units(_exec_pods(templates, inject))
        elif kind == "Parallel":  # an exec that runs for the duration (slow)
            command = templates[fault["children"][0]]["task"]["container"]["command"]
            duration = float(command[command.index("--seconds") + 1])
            units = _units(_exec_pods(templates, fault))
        else:
            body = next(v for k, v in fault.items() if k.endswith("Chaos"))
            duration = int(fault["deadline"][:-2]) / 1000
            units = _units(next(iter(body["selector"]["pods"].values())))
        out[fault["name"]] = (start, duration, units, kind)
    return out


def _round_trip(scenario) -> None:
    manifest = yaml.safe_load(dump_all([workflow(scenario)]))
    back = _read_back(manifest)
    planned = plan(scenario)
    assert len(back) == len(planned)
    for p in planned:
        start, duration, units, _ = back[template_name(p.fault_id, planned)]
        assert start == pytest.approx(p.at, abs=5e-4), p
        if p.params.get("restart", True):
            assert duration == pytest.approx(p.duration, abs=5e-4), p
        else:  # a learner never restarted stays down until the run's end
            assert duration >= p.duration and start + duration >= scenario.timeout_s - 1e-3, p
        assert units == tuple(sorted(p.targets)), p


def test_every_kind_is_mapped() -> None:
    """Every built-in kind exports (a kind added without a mapping is refused by name: test_fault_kind_registry)."""
    assert set(MAPPING) == set(KINDS) and not UNSUPPORTED


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_a_builtin_scenarios_faults_survive_the_mapping(name: str) -> None:
    _round_trip(load_scenario(builtin_scenarios()[name]))


@given(fault_schedules(learners=3, kinds=[k for k in EXPORTABLE if k in KINDS and KINDS[k].local]))
def test_generated_schedules_survive_the_mapping(schedule) -> None:
    template = load_scenario(builtin_scenarios()["kill-one-learner"])
    _round_trip(to_scenario(template, schedule, outer_step_s=0.7))


def test_a_fault_started_by_merge_count_is_refused() -> None:
    s = scenario_with(
        "kill-one-learner", schedule=[{"fault": "kill", "targets": ["learner-1"], "at_merge": 5, "duration": 3}]
    )
    with pytest.raises(ScenarioError, match="starts at merge 5; a Workflow starts steps by time only"):
        workflow(s)


def test_network_faults_keep_direction_and_parameters() -> None:
    s = scenario_with(
        "kill-one-learner",
        schedule=[
            {
                "fault": "partition",
                "id": "p",
                "targets": ["learner-0"],
                "at": 1,
                "duration": 2,
                "direction": "to_syncer",
            },
            {
                "fault": "latency",
                "id": "l",
                "targets": ["learner-1"],
                "at": 1,
                "duration": 2,
                "latency_ms": 100,
                "jitter_ms": 20,
            },
            {"fault": "bandwidth", "id": "b", "targets": ["learner-2"], "at": 1, "duration": 2, "rate_kbps": 300},
        ],
    )
    t = {x["name"]: x for x in workflow(s).body["spec"]["templates"]}
    assert t["p"]["networkChaos"]["direction"] == "to" and t["p"]["networkChaos"]["action"] == "partition"
    assert t["p"]["networkChaos"]["target"]["selector"]["pods"] == {"diloco-chaos": [SYNCER_POD]}
    assert t["l"]["networkChaos"]["delay"] == {"latency": "100ms", "jitter": "20ms", "correlation": "0"}
    assert t["b"]["networkChaos"]["bandwidth"]["rate"] == "300kbps"


def test_the_cluster_runs_the_scenarios_config_with_a_credential_per_learner() -> None:
    s = load_scenario(builtin_scenarios()["kill-one-learner"])
    objs = {(o.kind, o.name): o.manifest() for o in cluster_objects(s, token="t" * 32, opts=ClusterOptions("ns"))}
    assert yaml.safe_load(objs[("ConfigMap", "diloco-config")]["data"]["config.yaml"]) == yaml.safe_load(
        s.cluster.to_yaml()
    )
    creds = objs[("Secret", "diloco-credentials")]["stringData"]
    assert set(creds) == {"syncer", "learner-0", "learner-1", "learner-2"} and creds["syncer"] == "t" * 32
    assert len(set(creds.values())) == 4  # each learner its own credential
    learners = objs[("StatefulSet", "learner")]["spec"]
    assert learners["replicas"] == 3 and "--id" in learners["template"]["spec"]["containers"][0]["args"]


def test_exec_faults_run_faults_in_pod_in_each_target_between_a_hold() -> None:
    """pause and corrupt: kubectl exec of faults.in_pod into every target's pod, a Suspend, the exec that heals."""
    s = scenario_with(
        "kill-one-learner",
        schedule=[
            {"fault": "pause", "id": "p", "targets": ["learner-0", "learner-2"], "at": 1, "duration": 4},
            {"fault": "corrupt", "id": "c", "targets": ["learner-1"], "at": 2, "duration": 6, "mode": "garbage"},
        ],
    )
    t = {
        x["name"]: x
        for x in workflow(s, ClusterOptions("ns", kubectl_image="kubectl:test")).body["spec"]["templates"]
    }
    assert t["p"]["children"] == ["p-inject", "p-hold", "p-heal"] and t["p-hold"]["deadline"] == "4000ms"
    cmds = [t[c]["task"]["container"]["command"] for c in t["p-inject"]["children"]]
    assert cmds == [
        ["kubectl", "exec", "-n", "ns", pod, "-c", "learner", "--", "python", "-m", "faults.in_pod", "stop"]
        for pod in ("learner-0", "learner-2")
    ]
    assert t["p-heal-0"]["task"]["container"]["command"][-1] == "cont"
    assert t["c-inject-0"]["task"]["container"]["command"][-2:] == ["corrupt", "garbage"]
    assert t["c-heal-0"]["task"]["container"]["command"][-1] == "healthy"
    assert t["c-inject-0"]["task"]["container"]["image"] == "kubectl:test"


def test_connection_faults_run_in_the_netfault_sidecar_which_only_their_learner_pods_get() -> None:
    """reset_peer and data_limit: the sidecar's commands (chaos.k8s.netfault) in each target's pod, between a hold;
    the sidecar (NET_ADMIN) is in the learner pods only when the plan has one of them."""
    s = scenario_with(
        "kill-one-learner",
        schedule=[
            {
                "fault": "reset_peer",
                "id": "r",
                "targets": ["learner-1"],
                "at": 1,
                "duration": 4,
                "timeout_ms": 300,
            },
            {
                "fault": "data_limit",
                "id": "d",
                "targets": ["learner-0", "learner-2"],
                "at": 2,
                "duration": 6,
                "bytes": 5000,
                "direction": "from_syncer",
            },
        ],
    )
    t = {x["name"]: x for x in workflow(s, ClusterOptions("ns")).body["spec"]["templates"]}
    assert t["r"]["children"] == ["r-inject", "r-hold", "r-heal"] and t["r-hold"]["deadline"] == "4000ms"
    inject, heal = reset_peer_commands("r", 50051, 300, 4)
    assert t["r-inject-0"]["task"]["container"]["command"] == [
        "kubectl",
        "exec",
        "-n",
        "ns",
        "learner-1",
        "-c",
        NETFAULT_CONTAINER,
        "--",
        "sh",
        "-c",
        inject,
    ]
    assert t["r-heal-0"]["task"]["container"]["command"][-1] == heal
    inject, heal = data_limit_commands(50051, 5000, "from_syncer")
    assert _exec_pods(t, t["d-inject"]) == ["learner-0", "learner-2"]
    assert {t[c]["task"]["container"]["command"][-1] for c in t["d-inject"]["children"]} == {inject}
    assert {t[c]["task"]["container"]["command"][-1] for c in t["d-heal"]["children"]} == {heal}

    def containers(scenario) -> list[dict]:
        objs = {(o.kind, o.name): o.body for o in cluster_objects(scenario, "t" * 32)}
        return objs[("StatefulSet", "learner")]["spec"]["template"]["spec"]["containers"]

    sidecar = containers(s)[1]
    assert (
        sidecar["name"] == NETFAULT_CONTAINER
        and sidecar["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
        and sidecar["securityContext"]["allowPrivilegeEscalation"] is False
    )
    assert [c["name"] for c in containers(scenario_with("kill-one-learner"))] == ["learner"]


def test_the_exec_steps_get_a_role_and_only_when_there_are_any(tmp_path) -> None:
    with_exec = export(load_scenario(builtin_scenarios()["straggler"]), tmp_path / "s", token="t" * 32)
    kinds = [d["kind"] for d in yaml.safe_load_all(with_exec.workflow.read_text())]
    assert kinds == ["Role", "RoleBinding", "Workflow"] and with_exec.objects == 6 + 3
    without = export(load_scenario(builtin_scenarios()["kill-and-rejoin"]), tmp_path / "k", token="t" * 32)
    assert [d["kind"] for d in yaml.safe_load_all(without.workflow.read_text())] == ["Workflow"]


def test_export_sizes_each_pods_requests_from_the_command_line(tmp_path, capsys):
    # One 2-core node cannot hold a syncer and four learners at the default 1 CPU each (the scheduler leaves two
    # learners Pending: "Insufficient cpu", seen on scripts/install-cluster's node).
    from chaos import cli

    assert cli.main(["export", "k8s", "kill-and-rejoin", "--out", str(tmp_path / "x"), "--cpu", "250m"]) == 0
    docs = [
        d for d in yaml.safe_load_all((tmp_path / "x" / "cluster.yaml").read_text()) if d["kind"] == "StatefulSet"
    ]
    requests = [c["resources"]["requests"] for d in docs for c in d["spec"]["template"]["spec"]["containers"]]
    assert requests and all(r == {"cpu": "250m", "memory": ClusterOptions.memory} for r in requests), requests
    with pytest.raises(SystemExit) as stop:
        cli.main(["export", "k8s", "kill-and-rejoin", "--out", str(tmp_path / "y"), "--memory", "2 GB"])
    assert stop.value.code == 2 and "'2 GB' is not a Kubernetes quantity" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_every_trainer_container_waits_after_finishing_instead_of_exiting(capsys):
    # A StatefulSet restarts a container that exits 0: on a real cluster the finished syncer went into
    # CrashLoopBackOff and `collect` could not copy its events out. Each trainer process gets the flag, and each
    # one's own command line knows it.
    from trainer import learner, syncer

    objs = cluster_objects(scenario_with("kill-and-rejoin"), "t0ken")
    containers = {
        c["name"]: c["args"]
        for o in objs
        if o.kind == "StatefulSet"
        for c in o.body["spec"]["template"]["spec"]["containers"]
    }
    assert set(containers) == {"syncer", "learner"}, containers
    assert all("--no-exit-on-finish" in args for args in containers.values()), containers
    for module in (syncer, learner):
        with pytest.raises(SystemExit) as shown:
            module.main(["--help"])
        assert shown.value.code == 0 and "--no-exit-on-finish" in capsys.readouterr().out
