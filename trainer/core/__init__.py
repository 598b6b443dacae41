"""The pure core of Decoupled DiLoCo: no I/O, no clocks, no gRPC.

Every function or state machine here takes the current time (`now`, seconds)
as an argument where time matters, so the same code runs behind gRPC, under a
virtual clock in tests, and inside the discrete-event simulator.

Modules, one concept each:

- :mod:`trainer.core.fragments` — balanced tensor fragmentation.
- :mod:`trainer.core.fragment_schedule` — the staggered fragment schedule (H, τ).
- :mod:`trainer.core.ema` — exponential moving averages.
- :mod:`trainer.core.grace` — minimum quorum and the adaptive grace window.
- :mod:`trainer.core.merge` — token weights and merge rules (mean, RDA).
- :mod:`trainer.core.outer` — the outer Nesterov optimizer (optax).
- :mod:`trainer.core.reasons` — why a contribution can be refused.
- :mod:`trainer.core.syncer_state` — the syncer state machine.
- :mod:`trainer.core.learner_book` — a learner's per-fragment bookkeeping.
"""
