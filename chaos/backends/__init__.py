"""Backends: where the cluster runs (local processes now; containers later) behind one Cluster protocol."""
