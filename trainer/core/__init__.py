"""The pure core of Decoupled DiLoCo: no I/O, no clocks, no gRPC.

Every function or state machine here takes the current time (`now`, seconds)
as an argument where time matters, so the same code runs behind gRPC, under a
virtual clock in tests, and inside the discrete-event simulator.

Modules, one concept each:

- the algorithm: :mod:`~trainer.core.algorithm` (its settings, resolved once),
  :mod:`~trainer.core.fragments` (balanced fragmentation),
  :mod:`~trainer.core.fragment_schedule` (the staggered schedule: H, τ), :mod:`~trainer.core.rounds` (rounds on
  the syncer's step clock), :mod:`~trainer.core.grace` (minimum quorum, the adaptive grace window),
  :mod:`~trainer.core.inflight` (uploads in flight), :mod:`~trainer.core.merge` (token weights, merge rules),
  :mod:`~trainer.core.outer` (the outer Nesterov step), :mod:`~trainer.core.ema` (moving averages),
  :mod:`~trainer.core.wire_formats` (how an outer gradient travels: fp32, bf16, int8, int4);
- the syncer: :mod:`~trainer.core.syncer_state` (the state machine), :mod:`~trainer.core.syncer_driver` (its
  driving loop, once), :mod:`~trainer.core.syncer_policy`, :mod:`~trainer.core.syncer_records`,
  :mod:`~trainer.core.checkpoint_meta` and
  :mod:`~trainer.core.checkpoint_codec` (what a checkpoint holds), :mod:`~trainer.core.merged_tokens`;
- a learner: :mod:`~trainer.core.learner_protocol` (its step protocol, once), :mod:`~trainer.core.learner_book`
  (per-fragment bookkeeping), :mod:`~trainer.core.replies` (reacting to the syncer's answers),
  :mod:`~trainer.core.step_timer`, :mod:`~trainer.core.header_lag`, :mod:`~trainer.core.deadlines` (a call's
  deadline by the bytes it carries);
- trust: :mod:`~trainer.core.upload_checks` (what an upload must satisfy), :mod:`~trainer.core.claims` (what a
  learner claims, bounded), :mod:`~trainer.core.token_allowance` (the tokens time allows a learner id),
  :mod:`~trainer.core.drift` (a learner's pull from the merges' medians, summed over rounds),
  :mod:`~trainer.core.reasons` (why something is refused), :mod:`~trainer.core.repeats` (repeated refusals
  logged once per window),
  :mod:`~trainer.core.credentials`, :mod:`~trainer.core.audit` (the merge audit's record),
  :mod:`~trainer.core.corruption` (the ``corrupt`` fault's payloads).
"""
