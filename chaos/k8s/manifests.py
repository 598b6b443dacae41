"""The cluster of a scenario as Kubernetes objects: the syncer and the learners, their config and credentials.

| object | what it holds |
|---|---|
| ConfigMap ``diloco-config`` | the scenario's resolved run config (``config.yaml``), which every process reads |
| Secret ``diloco-credentials`` | the run's shared token (key ``syncer``) and each learner's own credential |
| StatefulSet + Service ``syncer`` | one syncer; gRPC health probes; its checkpoints and events on a volume |
| StatefulSet + headless Service ``learner`` | M learners: pod ``learner-i`` is learner ``learner-i``; with ``reset_peer`` or ``data_limit`` in the plan, a ``netfault`` sidecar each (:mod:`chaos.k8s.netfault`) |

Every pod serves Prometheus ``/metrics`` on port 9400 (``prometheus.io/*`` annotations) and writes its events
to ``/data/run/events/`` on its own volume, where ``kubectl cp`` collects them for ``diloco-chaos report``.
The token is random (a secret: not derived from the scenario's seed) unless given.

Example:
    >>> from chaos.scenario import builtin_scenarios, load_scenario
    >>> objs = cluster_objects(load_scenario(builtin_scenarios()["kill-one-learner"]), token="t" * 32)
    >>> [(o.kind, o.name) for o in objs]  # doctest: +NORMALIZE_WHITESPACE
    [('ConfigMap', 'diloco-config'), ('Secret', 'diloco-credentials'), ('Service', 'syncer'),
     ('StatefulSet', 'syncer'), ('Service', 'learner'), ('StatefulSet', 'learner')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chaos.backends.unit import LEARNER_SERVICE, SYNCER_PORT, UNIT_UID
from chaos.container_probe import METRICS_PORT
from chaos.fault_plan import plan
from chaos.k8s.netfault import DEFAULT_IMAGE, NETFAULT_KINDS, sidecar
from chaos.k8s.objects import Body, K8sObject
from chaos.scenario import Scenario
from trainer.config import learner_ids
from trainer.core.credentials import learner_credential

CONFIG_DIR = "/etc/diloco"
CREDENTIALS_DIR = "/etc/diloco/credentials"
RUN_DIR = "/data/run"


QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def quantity(text: str) -> str:
    """A Kubernetes resource quantity (``250m``, ``1``, ``2Gi``), or ValueError naming what a quantity looks like.

    >>> quantity("250m"), quantity("1.5Gi")
    ('250m', '1.5Gi')
    >>> quantity("1 core")
    Traceback (most recent call last):
    ...
    ValueError: '1 core' is not a Kubernetes quantity: a number with an optional suffix (250m, 2, 512Mi, 2Gi)
    """
    if not QUANTITY.match(text):
        raise ValueError(
            f"{text!r} is not a Kubernetes quantity: a number with an optional suffix (250m, 2, 512Mi, 2Gi)"
        )
    return text


# A StatefulSet restarts a container that exits, even with code 0: a finished syncer or learner restarted, resumed,
# found the budget reached and exited again, into CrashLoopBackOff, and `collect` could not copy its events out of a
# container that was not running (seen on a real cluster, scripts/install-cluster). Finished, each waits for SIGTERM.
NO_EXIT = "--no-exit-on-finish"


@dataclass(frozen=True)
class ClusterOptions:
    namespace: str = "diloco-chaos"
    image: str = "diloco-chaos:latest"
    storage: str = "1Gi"  # each pod's volume: checkpoints (syncer), events (all)
    cpu: str = "1"  # requests per pod: the tiny model trains on one core (a one-node cluster of 2 cores: 250m)
    memory: str = "2Gi"
    # What the Workflow's exec steps run (pause, slow, corrupt: faults.in_pod through kubectl exec).
    kubectl_image: str = "registry.k8s.io/kubectl:v1.35.0"
    # The learners' netfault sidecar, only when the plan has reset_peer or data_limit (chaos.k8s.netfault).
    netfault_image: str = DEFAULT_IMAGE


def _pod_spec(containers: list[Body]) -> Body:
    return {
        "securityContext": {
            "runAsUser": UNIT_UID,
            "runAsGroup": UNIT_UID,
            "fsGroup": UNIT_UID,
            "runAsNonRoot": True,
        },
        "terminationGracePeriodSeconds": 5,
        # The trainer is then not PID 1 (the pod's pause process is), so faults.in_pod can SIGSTOP it.
        "shareProcessNamespace": True,
        "containers": containers,
        "volumes": [
            {"name": "config", "configMap": {"name": "diloco-config"}},
            {"name": "credentials", "secret": {"secretName": "diloco-credentials", "defaultMode": 0o440}},
        ],
    }


def _container(name: str, args: list[str], opts: ClusterOptions, ports: list[Body], probes: Body) -> Body:
    return {
        "name": name,
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [*ports, {"name": "metrics", "containerPort": METRICS_PORT}],
        "resources": {"requests": {"cpu": opts.cpu, "memory": opts.memory}},
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True},
            {"name": "data", "mountPath": "/data"},
        ],
        **probes,
    }


def _statefulset(name: str, replicas: int, containers: list[Body], opts: ClusterOptions) -> K8sObject:
    labels = {"app.kubernetes.io/name": "diloco-chaos", "app.kubernetes.io/component": name}
    return K8sObject(
        "apps/v1",
        "StatefulSet",
        name,
        opts.namespace,
        {
            "spec": {
                "serviceName": name,
                "replicas": replicas,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            "prometheus.io/scrape": "true",
                            "prometheus.io/port": str(METRICS_PORT),
                            "prometheus.io/path": "/metrics",
                        },
                    },
                    "spec": _pod_spec(containers),
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": opts.storage}},
                        },
                    }
                ],
            }
        },
        labels={"app.kubernetes.io/component": name},
    )


def _service(name: str, ports: list[Body], opts: ClusterOptions, headless: bool = False) -> K8sObject:
    spec: Body = {
        "selector": {"app.kubernetes.io/name": "diloco-chaos", "app.kubernetes.io/component": name},
        "ports": ports,
    }
    if headless:
        spec["clusterIP"] = "None"
    return K8sObject(
        "v1", "Service", name, opts.namespace, {"spec": spec}, labels={"app.kubernetes.io/component": name}
    )


def exec_rbac(opts: ClusterOptions) -> list[K8sObject]:
    """What the Workflow's exec steps need: its Task pods run as the namespace's ``default`` ServiceAccount, which
    may then exec into the namespace's pods (only when the scenario has pause, slow or corrupt)."""
    role = K8sObject(
        "rbac.authorization.k8s.io/v1",
        "Role",
        "diloco-chaos-exec",
        opts.namespace,
        {
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
            ]
        },
    )
    binding = K8sObject(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "diloco-chaos-exec",
        opts.namespace,
        {
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": opts.namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "diloco-chaos-exec"},
        },
    )
    return [role, binding]


def cluster_objects(scenario: Scenario, token: str, opts: ClusterOptions = ClusterOptions()) -> list[K8sObject]:
    """The objects that run ``scenario``'s cluster (its faults: :func:`chaos.k8s.chaos_mesh.workflow`)."""
    cfg = scenario.cluster
    learners = learner_ids(cfg.algorithm.num_learners)
    config = K8sObject(
        "v1",
        "ConfigMap",
        "diloco-config",
        opts.namespace,
        {"data": {"config.yaml": cfg.to_yaml()}},
        annotations={"diloco-chaos/scenario": scenario.name, "diloco-chaos/config-hash": cfg.config_hash()},
    )
    credentials = K8sObject(
        "v1",
        "Secret",
        "diloco-credentials",
        opts.namespace,
        {
            "type": "Opaque",
            "stringData": {"syncer": token, **{lid: learner_credential(token, lid) for lid in learners}},
        },
    )
    grpc_probe = {"grpc": {"port": SYNCER_PORT}}
    syncer = _container(
        "syncer",
        [
            "python",
            "-m",
            "trainer.syncer",
            "--config",
            f"{CONFIG_DIR}/config.yaml",
            "--run-dir",
            RUN_DIR,
            "--host",
            "0.0.0.0",
            "--port",
            str(SYNCER_PORT),
            "--token-file",
            f"{CREDENTIALS_DIR}/syncer",
            NO_EXIT,
            "--metrics-host",
            "0.0.0.0",
            "--metrics-port",
            str(METRICS_PORT),
        ],
        opts,
        [{"name": "grpc", "containerPort": SYNCER_PORT}],
        {
            "readinessProbe": {**grpc_probe, "periodSeconds": 2},
            "livenessProbe": {**grpc_probe, "periodSeconds": 10, "failureThreshold": 6},
        },
    )
    learner = _container(
        LEARNER_SERVICE,
        [
            "python",
            "-m",
            "trainer.learner",
            "--config",
            f"{CONFIG_DIR}/config.yaml",
            "--id",
            "$(POD_NAME)",
            "--corrupt-file",
            "/data/corrupt",
            "--syncer",
            f"syncer:{SYNCER_PORT}",
            "--run-dir",
            RUN_DIR,
            "--token-file",
            f"{CREDENTIALS_DIR}/$(POD_NAME)",
            NO_EXIT,
            "--metrics-host",
            "0.0.0.0",
            "--metrics-port",
            str(METRICS_PORT),
        ],
        opts,
        [],
        {
            "livenessProbe": {
                "httpGet": {"path": "/metrics", "port": METRICS_PORT},
                "periodSeconds": 10,
                "failureThreshold": 6,
            }
        },
    )
    metrics_port = {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}
    needs_netfault = any(p.kind in NETFAULT_KINDS for p in plan(scenario))
    sidecars = [sidecar(opts.netfault_image)] if needs_netfault else []
    return [
        config,
        credentials,
        _service("syncer", [{"name": "grpc", "port": SYNCER_PORT, "targetPort": SYNCER_PORT}, metrics_port], opts),
        _statefulset("syncer", 1, [syncer], opts),
        _service(LEARNER_SERVICE, [metrics_port], opts, headless=True),
        _statefulset(LEARNER_SERVICE, len(learners), [learner, *sidecars], opts),
    ]
