"""How long communication takes, and how much of it a step can hide.

Assumptions (stated in docs/scale-simulator.md):

- **Data-parallel** all-reduces the gradients (``params × bytes_per_param``)
  every step. Inside a site the interconnect keeps up (its cost is part of
  ``step_s``); across ``S > 1`` sites a ring over the sites' links moves
  ``2 (S−1)/S`` of the bytes through each link, with ``2 (S−1)`` latencies.
  The all-reduce hides behind ``dp_overlap × step_s`` of the step; the rest
  is exposed and stalls every chip.
- **Synchronous DiLoCo** sends the whole model up to the syncer and back every
  H steps, over each learner's own link; nothing overlaps, so the round trip
  (plus ``round_overhead_s``) stalls everyone.
- **Decoupled DiLoCo** sends one fragment (``1/P`` of the model) up and back
  per sync and keeps stepping meanwhile; it never waits, but a link slower
  than the fragment rate falls behind (reported as the sync lag).

Bandwidth 0 means unlimited.

Example:
    >>> transfer_s(3e9, gbps=2.0, latency_s=0.05)    # 3 GB over 2 Gbit/s, plus latency
    12.05
    >>> round(ring_allreduce_s(24e9, sites=4, gbps=5.0, latency_s=0.02), 2)
    57.72
    >>> ring_allreduce_s(24e9, sites=1, gbps=5.0, latency_s=0.02)
    0.0
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.scale.config import ScaleConfig


def transfer_s(nbytes: float, gbps: float, latency_s: float) -> float:
    """One message of ``nbytes`` over one link."""
    wire = 0.0 if gbps <= 0 else nbytes * 8 / (gbps * 1e9)
    return wire + latency_s


def ring_allreduce_s(nbytes: float, sites: int, gbps: float, latency_s: float) -> float:
    """All-reduce of ``nbytes`` across ``sites`` over a ring of their links (0 for one site)."""
    if sites <= 1:
        return 0.0
    wire = 0.0 if gbps <= 0 else 2 * (sites - 1) / sites * nbytes * 8 / (gbps * 1e9)
    return wire + 2 * (sites - 1) * latency_s


@dataclass(frozen=True)
class CommTimes:
    """The communication a plan's mode does, in seconds."""

    dp_allreduce_s: float  # data-parallel, per step
    dp_exposed_s: float  # ... of which not hidden behind the step
    round_s: float  # synchronous DiLoCo: full model up and back, blocking, per round
    fragment_up_s: float  # decoupled: one fragment up
    fragment_down_s: float  # decoupled: one fragment back

    @property
    def fragment_round_trip_s(self) -> float:
        return self.fragment_up_s + self.fragment_down_s


def comm_times(cfg: ScaleConfig) -> CommTimes:
    """Example:
    >>> from chaos.scale.config import build_scale_config
    >>> cfg = build_scale_config({"cluster": {"sites": 4}, "workload": {"params": "12B"},
    ...                           "network": {"bandwidth": 5, "dp_overlap": 0.5}})
    >>> c = comm_times(cfg)
    >>> round(c.dp_allreduce_s, 1), round(c.dp_exposed_s, 1), round(c.round_s, 1)
    (57.6, 57.1, 76.8)
    """
    net, w = cfg.network, cfg.workload
    nbytes = cfg.model_bytes
    allreduce = ring_allreduce_s(nbytes, cfg.cluster.sites, net.bandwidth, net.latency)
    frag = nbytes / cfg.algorithm.num_fragments
    return CommTimes(
        dp_allreduce_s=allreduce,
        dp_exposed_s=max(0.0, allreduce - net.dp_overlap * w.step_s),
        round_s=2 * transfer_s(nbytes, net.bandwidth, net.latency) + net.round_overhead_s,
        fragment_up_s=transfer_s(frag, net.bandwidth, net.latency),
        fragment_down_s=transfer_s(frag, net.bandwidth, net.latency),
    )
