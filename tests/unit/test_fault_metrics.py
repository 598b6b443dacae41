"""chaos.fault_metrics: a fault is active from its inject's ok to its heal's invoke, per target."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from chaos.fault_metrics import FaultMetrics
from chaos.history import FaultOp, Phase


def _op(action: str, outcome: str, fault_id: str = "f0", targets: tuple[str, ...] = ("learner-1", "learner-2")):
    return FaultOp(
        fault_id=fault_id, fault_kind="partition", action=action, outcome=outcome, targets=list(targets)
    )


def _active(m: FaultMetrics, target: str, fault_id: str = "f0") -> float | None:
    return m.registry.get_sample_value(
        "diloco_fault_active", {"fault_id": fault_id, "kind": "partition", "target": target}
    )


def test_active_from_inject_ok_to_heal_invoke_on_every_target() -> None:
    m = FaultMetrics(CollectorRegistry())
    m.observe(_op("inject", "invoke"))
    assert _active(m, "learner-1") is None  # not in effect until the inject succeeded
    m.observe(_op("inject", "ok"))
    assert _active(m, "learner-1") == 1 and _active(m, "learner-2") == 1
    m.observe(_op("heal", "invoke"))
    assert _active(m, "learner-1") == 0 and _active(m, "learner-2") == 0
    m.observe(_op("heal", "ok"))
    ops = m.registry.get_sample_value
    assert ops("diloco_fault_ops_total", {"kind": "partition", "action": "heal", "outcome": "ok"}) == 1
    assert ops("diloco_fault_ops_total", {"kind": "partition", "action": "inject", "outcome": "invoke"}) == 1


def test_a_failed_inject_is_never_active() -> None:
    m = FaultMetrics(CollectorRegistry())
    m.observe(_op("inject", "invoke", "f1"))
    m.observe(_op("inject", "fail", "f1"))
    assert _active(m, "learner-1", "f1") is None
    assert (
        m.registry.get_sample_value(
            "diloco_fault_ops_total", {"kind": "partition", "action": "inject", "outcome": "fail"}
        )
        == 1
    )


def test_phases_are_timestamped() -> None:
    m = FaultMetrics(CollectorRegistry())
    m.observe(Phase(name="steady", ts=1234.5))
    assert m.registry.get_sample_value("diloco_chaos_phase_timestamp_seconds", {"phase": "steady"}) == 1234.5
