"""Kubernetes export: a scenario as manifests for its cluster and a Chaos Mesh Workflow for its faults.

:mod:`chaos.k8s.manifests` writes the syncer and learners (StatefulSets, Services, ConfigMap, Secret) and
:mod:`chaos.k8s.chaos_mesh` the scenario's fault plan as a ``Workflow`` of PodChaos, NetworkChaos and
StressChaos steps. Both are pure functions of the scenario (no cluster, no client library): the objects are
plain mappings, written as YAML by :mod:`chaos.k8s.export`, and checked against the real Go API types by
``tools/k8scheck`` (strict decoding: an unknown field is an error). ``docs/kubernetes.md`` walks through it.
"""
