"""The injector of every fault kind, by name: how a scenario's fault entry becomes a :class:`faults.base.Fault`.

Each injector module lists its classes in ``FAULTS``; a class's ``kind`` names
its entry in :data:`faults.kinds.KINDS`, its ``Params`` declares the scenario
entry's parameters (:mod:`faults.params`; none if it has no ``Params``), and
its constructor takes them by their names (``rate_kbps``, ``direction`` ...),
so building one needs no code per kind.

Example:
    >>> build("latency", "f0", ("learner-0",), {"latency_ms": 50, "jitter_ms": 0, "direction": "both"}).describe()
    'latency +50 ms one way on learner-0'
    >>> list(params_of(INJECTORS["latency"]).model_fields), params_of(INJECTORS["pause"]) is FaultParams
    (['latency_ms', 'jitter_ms', 'direction'], True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faults import container, network, process
from faults.base import Fault
from faults.params import FaultParams

# type, not type[Fault]: each class's constructor takes its own kind's parameters.
INJECTORS: Mapping[str, type] = {cls.kind: cls for cls in (*process.FAULTS, *network.FAULTS, *container.FAULTS)}


def build(kind: str, fault_id: str, targets: tuple[str, ...], params: Mapping[str, Any]) -> Fault:
    """The injector for one fault: ``INJECTORS[kind](fault_id, targets, **params)``."""
    if kind not in INJECTORS:
        raise KeyError(f"fault kind {kind!r} has no injector; known: {', '.join(INJECTORS)}")
    return INJECTORS[kind](fault_id, targets, **params)


def params_of(injector: type) -> type[FaultParams]:
    """The scenario parameters an injector class declares (its ``Params``; a kind without parameters may omit it)."""
    return getattr(injector, "Params", FaultParams)
