"""A Kubernetes object as export writes it: apiVersion, kind, metadata and the rest, as a plain mapping.

Typed at the edges that matter (which kind, which name, which file it goes to); the body stays a mapping, as
every Kubernetes client and ``kubectl`` take it. ``tools/k8scheck`` decodes each body into its Go type.

Example:
    >>> o = K8sObject("v1", "ConfigMap", "diloco-config", "ns", {"data": {"a": "1"}})
    >>> o.manifest()["metadata"]
    {'name': 'diloco-config', 'namespace': 'ns', 'labels': {'app.kubernetes.io/name': 'diloco-chaos'}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

APP = "diloco-chaos"
Body = dict[str, Any]  # a Kubernetes object's fields beyond apiVersion, kind and metadata


@dataclass(frozen=True)
class K8sObject:
    api_version: str
    kind: str
    name: str
    namespace: str
    body: Body
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def manifest(self) -> Body:
        meta: Body = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/name": APP, **self.labels},
        }
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta, **self.body}


class _Plain(yaml.SafeDumper):
    """No anchors and aliases (&id001, *id001) for a mapping written twice: manifests people read and diff."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def dump_all(objects: list[K8sObject]) -> str:
    """Multi-document YAML, one object each, keys in the order written (as people read manifests)."""
    return yaml.dump_all([o.manifest() for o in objects], Dumper=_Plain, sort_keys=False, default_flow_style=False)
