"""``diloco-chaos export k8s``: write a scenario's cluster and fault Workflow as Kubernetes YAML.

    DIR/cluster.yaml    ConfigMap, Secret, Services, StatefulSets (chaos.k8s.manifests)
    DIR/workflow.yaml   the Chaos Mesh Workflow of its faults (chaos.k8s.chaos_mesh), and the Role letting its
                        exec steps into the pods when it has any (pause, slow, corrupt)
    DIR/scenario.json   the scenario as exported, for `diloco-chaos report` on the run gathered afterwards

Nothing is written when a fault cannot be mapped: the error names every such fault.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from chaos.k8s.chaos_mesh import workflow
from chaos.k8s.manifests import ClusterOptions, cluster_objects, exec_rbac
from chaos.k8s.objects import dump_all
from chaos.scenario import Scenario


@dataclass(frozen=True)
class Exported:
    cluster: Path
    workflow: Path
    scenario: Path
    objects: int


def export(
    scenario: Scenario, out: Path, opts: ClusterOptions = ClusterOptions(), token: str | None = None
) -> Exported:
    flow = workflow(scenario, opts)  # first: a fault it cannot map stops the export before any file is written
    objects = cluster_objects(scenario, token or secrets.token_hex(16), opts)
    out.mkdir(parents=True, exist_ok=True)
    has_exec = any(t["templateType"] == "Task" for t in flow.body["spec"]["templates"])
    faults = [*(exec_rbac(opts) if has_exec else []), flow]
    paths = Exported(
        out / "cluster.yaml", out / "workflow.yaml", out / "scenario.json", len(objects) + len(faults)
    )
    paths.cluster.write_text(dump_all(objects))
    paths.cluster.chmod(0o600)  # it holds the run's credentials
    paths.workflow.write_text(dump_all(faults))
    paths.scenario.write_text(scenario.model_dump_json(indent=2))
    return paths
