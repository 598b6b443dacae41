"""Prometheus metrics of a chaos run's controller: which faults are active, derived from its records.

The controller's records (:mod:`chaos.history`) are the one source: :meth:`FaultMetrics.observe` runs as each is
written, so a dashboard's fault annotations and ``controller.jsonl`` agree by construction. A fault is active
from its inject's ``ok`` to its heal's ``invoke`` (from then on the run is healing it); Grafana annotates a panel
with ``changes(diloco_fault_active[1m]) > 0`` or shades where ``diloco_fault_active == 1``.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> m = FaultMetrics(CollectorRegistry())
    >>> m.observe(FaultOp(fault_id="f0", fault_kind="kill", action="inject", outcome="ok", targets=["learner-1"]))
    >>> m.registry.get_sample_value("diloco_fault_active", {"fault_id": "f0", "kind": "kill", "target": "learner-1"})
    1.0
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from chaos.history import ControllerRecord, FaultOp, Phase


class FaultMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.active = Gauge(
            "diloco_fault_active",
            "1 while a fault is in effect on a target, else 0",
            ["fault_id", "kind", "target"],
            registry=r,
        )
        self.ops = Counter(
            "diloco_fault_ops",
            "Fault steps, by kind, action (inject/heal) and outcome",
            ["kind", "action", "outcome"],
            registry=r,
        )
        self.phase = Gauge(
            "diloco_chaos_phase_timestamp_seconds",
            "When the run entered each phase (Unix time)",
            ["phase"],
            registry=r,
        )

    def observe(self, record: ControllerRecord) -> None:
        if isinstance(record, FaultOp):
            self.ops.labels(kind=record.fault_kind, action=record.action, outcome=record.outcome).inc()
            if record.action == "inject" and record.outcome == "ok":
                self._set(record, 1)
            elif record.action == "heal" and record.outcome == "invoke":
                self._set(record, 0)
        elif isinstance(record, Phase):
            self.phase.labels(phase=record.name).set(record.ts)

    def _set(self, op: FaultOp, value: int) -> None:
        for target in op.targets or [""]:
            self.active.labels(fault_id=op.fault_id, kind=op.fault_kind, target=target).set(value)
