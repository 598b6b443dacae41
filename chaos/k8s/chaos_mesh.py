"""A scenario's fault plan as a Chaos Mesh ``Workflow``: every fault a branch that waits, then injects.

The plan (:func:`chaos.fault_plan.plan`) says, for each fault, its kind, targets, start (seconds after steady
state) and duration. The Workflow's entry is a ``Parallel`` template with one ``Serial`` branch per fault: a
``Suspend`` for the start, then the chaos template whose ``deadline`` is the duration (Chaos Mesh recovers the
fault when the deadline passes: our heal). Apply it once training is steady (the first merge), as the
controller starts its clock then (``docs/kubernetes.md``).

Each fault kind maps to the Chaos Mesh experiment that does the same thing to a pod, or to exec steps for what no
experiment does (Task templates running :mod:`faults.in_pod` in the trainer's container, or
:mod:`chaos.k8s.netfault`'s commands in the pod's netfault sidecar); a kind with neither is refused by name (a test
holds every kind of :data:`faults.kinds.KINDS` to :data:`MAPPING`).

| kind | Chaos Mesh | how close |
|---|---|---|
| kill, stop, syncer_crash | PodChaos ``pod-failure`` for the duration | the container stops (SIGTERM, SIGKILL after the 5 s grace) and restarts when the deadline passes; ``restart: false`` stays down until the run's timeout |
| partition, link_down, disconnect | NetworkChaos ``partition`` to/from the syncer pod | tc drops packets (Toxiproxy's proxy is disabled) — the same from both ends |
| bandwidth | NetworkChaos ``bandwidth`` (``rate`` in KB/s, tc's ``kbps``) | tc's token bucket on the pod's interface, not per connection |
| latency | NetworkChaos ``delay`` (latency, jitter) | the same |
| cpu_limit | StressChaos ``cpu`` (load = the CPU share taken away) | competes for the CPU rather than capping it |
| pause, slow, corrupt | exec steps: ``kubectl exec`` of :mod:`faults.in_pod` in each target's pod (a Task) | the same signals |
| reset_peer | exec steps: a loop of ``ss -K`` on the learner's connections to the syncer, from inject to heal, in the pod's netfault sidecar (:mod:`chaos.k8s.netfault`) | a reset every ``max(timeout, 100 ms)`` rather than ``timeout`` after each connection's first byte |
| data_limit | exec steps: an ``iptables`` connbytes rule that resets a connection after its bytes, in the sidecar; removed at the heal | counts packet bytes, headers included (Toxiproxy: payload) |

Example:
    >>> from chaos.scenario import builtin_scenarios, load_scenario
    >>> w = workflow(load_scenario(builtin_scenarios()["kill-and-rejoin"]))
    >>> [(t["name"], t["templateType"], t.get("deadline")) for t in w.body["spec"]["templates"]][1:]
    [('fault-f0', 'Serial', None), ('wait-f0', 'Suspend', '3000ms'), ('f0', 'PodChaos', '8000ms')]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from chaos.backends.unit import LEARNER_SERVICE, SYNCER_PORT
from chaos.errors import ScenarioError
from chaos.fault_plan import Planned, plan
from chaos.k8s.manifests import ClusterOptions
from chaos.k8s.netfault import NETFAULT_CONTAINER, NETFAULT_KINDS, data_limit_commands, reset_peer_commands
from chaos.k8s.objects import Body, K8sObject
from chaos.scenario import Scenario
from faults.base import SYNCER
from trainer.config import learner_ids

CHAOS_API = "chaos-mesh.org/v1alpha1"
SYNCER_POD = "syncer-0"  # the syncer StatefulSet's one pod (chaos.k8s.manifests)
# tc's direction words, seen from the targeted learners: "to" the syncer, "from" it, or both.
DIRECTIONS = {"to_syncer": "to", "from_syncer": "from", "both": "both"}

EXEC_DEADLINE_S = 60.0  # a kubectl exec step: long enough for its pod to start, short enough to notice a hang

# Kinds with no Chaos Mesh experiment and no exec step that does the same thing, and what is missing (none now:
# reset_peer and data_limit run in the netfault sidecar). A kind in neither table is refused too.
UNSUPPORTED: dict[str, str] = {}


def _name(fault_id: str) -> str:
    """A template name Kubernetes accepts (lower-case letters, digits and '-').

    >>> _name("Slow_Box.2")
    'slow-box-2'
    """
    return re.sub(r"[^a-z0-9-]+", "-", fault_id.lower()).strip("-") or "fault"


def template_name(fault_id: str, planned: list[Planned]) -> str:
    """The fault's template name, unique in its Workflow ("a.0" and "a-0" would read the same: the later gets its
    index in the plan).

    >>> from types import SimpleNamespace as F
    >>> plan = [F(fault_id="a.0"), F(fault_id="a-0")]
    >>> template_name("a.0", plan), template_name("a-0", plan)
    ('a-0', 'a-0-1')
    """
    ids = [p.fault_id for p in planned]
    i = ids.index(fault_id)
    name = _name(fault_id)
    return name if all(_name(other) != name for other in ids[:i]) else f"{name}-{i}"


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


@dataclass(frozen=True)
class _Where:
    """What a mapping needs beyond the fault: the namespace, and every learner (the syncer's partition)."""

    namespace: str
    learners: list[str]
    kubectl_image: str

    def pods(self, names: list[str]) -> Body:
        return {"mode": "all", "selector": {"pods": {self.namespace: names}}}


def pod_of(unit: str) -> str:
    """The pod a unit runs in: ``syncer-0``, or ``learner-i`` (the learner StatefulSet's pod i is learner-i)."""
    return SYNCER_POD if unit == SYNCER else unit


def _chaos(name: str, duration: float, field: str, spec: Body) -> list[Body]:
    """One chaos template: Chaos Mesh injects it, and recovers it when the deadline passes (our heal)."""
    return [{"name": name, "templateType": _TEMPLATE_TYPE[field], "deadline": _ms(duration), field: spec}]


def _int(value: object) -> int:
    """A planned fault's whole-number parameter (its kind's Params validated it)."""
    assert isinstance(value, int | float | str), f"not a number: {value!r}"
    return int(value)


def _float(value: object) -> float:
    """A planned fault's numeric parameter (its kind's Params validated it)."""
    assert isinstance(value, int | float | str), f"not a number: {value!r}"
    return float(value)


def _pod_failure(p: Planned, w: _Where, name: str, duration: float) -> list[Body]:
    return _chaos(name, duration, "podChaos", {"action": "pod-failure", **w.pods([pod_of(t) for t in p.targets])})


def _network(
    p: Planned, w: _Where, name: str, duration: float, action: str = "partition", **extra: Body
) -> list[Body]:
    if SYNCER in p.targets:  # the syncer cut off from every learner
        source, target = [SYNCER_POD], w.learners
    else:
        source, target = list(p.targets), [SYNCER_POD]
    direction = DIRECTIONS[str(p.params.get("direction", "both"))]
    return _chaos(
        name,
        duration,
        "networkChaos",
        {"action": action, **w.pods(source), "direction": direction, "target": w.pods(target), **extra},
    )


def _bandwidth(p: Planned, w: _Where, name: str, duration: float) -> list[Body]:
    rate = _int(p.params["rate_kbps"])
    # limit: bytes queued before drops; buffer: the bucket's burst. tc wants both; these are Chaos Mesh's examples.
    return _network(
        p, w, name, duration, "bandwidth", bandwidth={"rate": f"{rate}kbps", "limit": 20971520, "buffer": 10000}
    )


def _delay(p: Planned, w: _Where, name: str, duration: float) -> list[Body]:
    return _network(
        p,
        w,
        name,
        duration,
        "delay",
        delay={
            "latency": f"{_int(p.params['latency_ms'])}ms",
            "jitter": f"{_int(p.params.get('jitter_ms', 0))}ms",
            "correlation": "0",
        },
    )


def _cpu_stress(p: Planned, w: _Where, name: str, duration: float) -> list[Body]:
    taken = 1.0 - min(_float(p.params["cpus"]), 1.0)  # the CPU share the limit takes away
    return _chaos(
        name,
        duration,
        "stressChaos",
        {
            **w.pods([pod_of(t) for t in p.targets]),
            "stressors": {"cpu": {"workers": 1, "load": max(1, min(100, round(100 * taken)))}},
        },
    )


Command = Callable[[str], tuple[list[str], str]]  # unit -> (argv, container): what _exec runs in its pod
Steps = Callable[
    [Planned, str, float], tuple[Command, Command]
]  # (fault, template name, duration) -> inject, heal


def _exec(p: Planned, w: _Where, name: str, command: Command, deadline: float = EXEC_DEADLINE_S) -> list[Body]:
    """``kubectl exec`` into every target's pod at once (a Parallel of one Task per target); ``command(unit)``
    gives the command and the container it runs in."""
    tasks = []
    for i, unit in enumerate(p.targets):
        argv, container = command(unit)
        tasks.append(
            {
                "name": f"{name}-{i}",
                "templateType": "Task",
                "deadline": _ms(deadline),
                "task": {
                    "container": {
                        "name": "exec",
                        "image": w.kubectl_image,
                        "command": [
                            "kubectl",
                            "exec",
                            "-n",
                            w.namespace,
                            pod_of(unit),
                            "-c",
                            container,
                            "--",
                            *argv,
                        ],
                    }
                },
            }
        )
    return [{"name": name, "templateType": "Parallel", "children": [t["name"] for t in tasks]}, *tasks]


def _in_pod(*action: str) -> Command:
    """``python -m faults.in_pod ACTION`` in the trainer's own container."""
    return lambda unit: (["python", "-m", "faults.in_pod", *action], SYNCER if unit == SYNCER else LEARNER_SERVICE)


def _in_sidecar(script: str) -> Command:
    """A shell command in the pod's netfault sidecar (chaos.k8s.netfault)."""
    return lambda unit: (["sh", "-c", script], NETFAULT_CONTAINER)


def _sidecar_steps(scripts: tuple[str, str]) -> tuple[Command, Command]:
    """chaos.k8s.netfault's (inject, heal) scripts, each run in the sidecar."""
    return _in_sidecar(scripts[0]), _in_sidecar(scripts[1])


def _held(steps: Steps) -> Callable[[Planned, _Where, str, float], list[Body]]:
    """A fault Chaos Mesh cannot inject itself: an exec into the pods, a Suspend for the duration, an exec."""

    def templates(p: Planned, w: _Where, name: str, duration: float) -> list[Body]:
        inject, heal = steps(p, name, duration)
        return [
            {
                "name": name,
                "templateType": "Serial",
                "children": [f"{name}-inject", f"{name}-hold", f"{name}-heal"],
            },
            *_exec(p, w, f"{name}-inject", inject),
            {"name": f"{name}-hold", "templateType": "Suspend", "deadline": _ms(duration)},
            *_exec(p, w, f"{name}-heal", heal),
        ]

    return templates


def _slow(p: Planned, w: _Where, name: str, duration: float) -> list[Body]:
    """The duty cycle runs in the pod for the duration (its exec's deadline leaves it a minute to start)."""
    return _exec(
        p,
        w,
        name,
        _in_pod(
            "slow",
            "--fraction",
            str(p.params["fraction"]),
            "--period",
            str(p.params["period_s"]),
            "--seconds",
            str(duration),
        ),
        deadline=duration + EXEC_DEADLINE_S,
    )


MAPPING: dict[str, Callable[[Planned, _Where, str, float], list[Body]]] = {
    "kill": _pod_failure,
    "stop": _pod_failure,
    "syncer_crash": _pod_failure,
    "partition": _network,
    "link_down": _network,
    "disconnect": _network,
    "bandwidth": _bandwidth,
    "latency": _delay,
    "cpu_limit": _cpu_stress,
    "pause": _held(lambda p, name, duration: (_in_pod("stop"), _in_pod("cont"))),
    "corrupt": _held(lambda p, name, duration: (_in_pod("corrupt", str(p.params["mode"])), _in_pod("healthy"))),
    "slow": _slow,
    "reset_peer": _held(
        lambda p, name, duration: _sidecar_steps(
            reset_peer_commands(name, SYNCER_PORT, _int(p.params.get("timeout_ms", 0)), duration)
        )
    ),
    "data_limit": _held(
        lambda p, name, duration: _sidecar_steps(
            data_limit_commands(SYNCER_PORT, _int(p.params["bytes"]), str(p.params.get("direction", "both")))
        )
    ),
}
# Run through kubectl exec: the Workflow needs RBAC objects; the netfault ones also the pods' sidecar.
EXEC_KINDS = frozenset({"pause", "corrupt", "slow", *NETFAULT_KINDS})
_TEMPLATE_TYPE = {"podChaos": "PodChaos", "networkChaos": "NetworkChaos", "stressChaos": "StressChaos"}


def unsupported(planned: list[Planned]) -> list[str]:
    """Why each fault of the plan cannot be exported (empty: all can)."""
    out = []
    for p in planned:
        if p.kind in UNSUPPORTED:
            out.append(f"fault {p.fault_id!r} ({p.kind}): {UNSUPPORTED[p.kind]}")
        elif p.kind not in MAPPING:
            out.append(f"fault {p.fault_id!r} ({p.kind}): no Chaos Mesh mapping for this kind")
        elif p.at is None:
            out.append(
                f"fault {p.fault_id!r} ({p.kind}): starts at merge {p.at_merge}; a Workflow starts steps "
                "by time only: give it 'at' seconds"
            )
    return out


def workflow_name(scenario: Scenario) -> str:
    """The Workflow is named after its scenario (what ``diloco-chaos collect k8s`` looks for)."""
    return _name(scenario.name)


def workflow(scenario: Scenario, opts: ClusterOptions = ClusterOptions()) -> K8sObject:
    """The scenario's faults as one Workflow; raises ScenarioError naming every fault it cannot map."""
    planned = plan(scenario)
    problems = unsupported(planned)
    if problems:
        raise ScenarioError(f"{scenario.name}: cannot export to Chaos Mesh: " + "; ".join(problems))
    where = _Where(opts.namespace, learner_ids(scenario.cluster.algorithm.num_learners), opts.kubectl_image)
    branches: list[str] = []
    templates: list[Body] = []
    for p in planned:
        name = template_name(p.fault_id, planned)
        assert p.at is not None  # unsupported() refused the others
        duration = p.duration
        if p.kind in ("kill", "stop") and not p.params.get("restart", True):
            duration = max(scenario.timeout_s - p.at, p.duration)  # never restarted: down until the run's end
        branches.append(f"fault-{name}")
        templates += [
            {"name": f"fault-{name}", "templateType": "Serial", "children": [f"wait-{name}", name]},
            {"name": f"wait-{name}", "templateType": "Suspend", "deadline": _ms(p.at)},
            *MAPPING[p.kind](p, where, name, duration),
        ]
    entry = {"name": "schedule", "templateType": "Parallel", "children": branches}
    return K8sObject(
        CHAOS_API,
        "Workflow",
        workflow_name(scenario),
        opts.namespace,
        {"spec": {"entry": "schedule", "templates": [entry, *templates]}},
        annotations={"diloco-chaos/scenario": scenario.name, "diloco-chaos/seed": str(scenario.seed)},
    )
