"""How deterministic mode's simulated machines behave (step times, restart delays, the network)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimOptions:
    """How the simulated machines behave. Defaults approximate the tiny model on this project's CI machine."""

    step_time_s: float = 0.03  # seconds per inner step (3 tiny learners sharing 2 cores)
    step_times: dict[str, float] = field(default_factory=dict)  # per learner: heterogeneous hardware
    step_jitter: float = 0.05  # ± fraction, seeded
    restart_delay_s: float = 3.0  # process start, imports and JIT before a restarted learner joins
    syncer_restart_delay_s: float = 2.0
    latency_s: float = 0.0005  # one way, per message
    bandwidth_Bps: float = 1.25e9  # 10 Gbit/s
    inner_lr: float = 0.1
    surrogate_dims: int = 16
    baseline: bool = True  # also simulate the fault-free run, for the parity check

    def key(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, default=str)
