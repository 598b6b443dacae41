"""Deterministic mode: chaos runs of the real syncer and learner cores on a virtual clock.

- :mod:`chaos.sim.clock` — the discrete-event loop.
- :mod:`chaos.sim.problem` — the surrogate objective learners optimise.
- :mod:`chaos.sim.network` — learner ↔ syncer links and network faults.
- :mod:`chaos.sim.syncer_node`, :mod:`chaos.sim.learner_node` — the simulated syncer and learner processes
  (:mod:`chaos.sim.host`: what they need of the simulation).
- :mod:`chaos.sim.runner` — :func:`simulate`: scenario in, judged history out.
"""

from chaos.sim.options import SimOptions
from chaos.sim.runner import SimResult, simulate

__all__ = ["SimOptions", "SimResult", "simulate"]
