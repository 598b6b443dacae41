"""The scale simulator: goodput, stalls and time to a token budget at data-centre scale.

Given chips, a failure rate, recovery times, links and an algorithm, it
simulates data-parallel (elastic or not), synchronous DiLoCo and Decoupled
DiLoCo with the trainer's own schedule, quorum and grace-window code, fast
enough for millions of chips over a simulated week.

- :mod:`chaos.scale.quantities` — ``7d``, ``2.4M``, ``5Gbps`` in plans and flags.
- :mod:`chaos.scale.config` — the typed plan (:class:`ScaleConfig`).
- :mod:`chaos.scale.outages` — the seeded failure process and each unit's outages.
- :mod:`chaos.scale.links` — transfer and all-reduce times, overlap.
- :mod:`chaos.scale.data_parallel`, :mod:`chaos.scale.sync_diloco`, :mod:`chaos.scale.decoupled` — the modes.
- :mod:`chaos.scale.result` — traces, the figures and their definitions.
- :mod:`chaos.scale.engine` — :func:`simulate_scale`.
- :mod:`chaos.scale.paper` — the paper's goodput table and this project's calibration.
- :mod:`chaos.scale.plots` — goodput against chips, and the timeline of a short run.
"""

from chaos.scale.config import ScaleConfig, build_scale_config, load_scale_config
from chaos.scale.engine import simulate_scale
from chaos.scale.result import ScaleResult

__all__ = ["ScaleConfig", "ScaleResult", "build_scale_config", "load_scale_config", "simulate_scale"]
