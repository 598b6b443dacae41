"""The fragment schedule: which fragment starts syncing after which inner step.

Fragment p syncs every H inner steps. With staggering, fragment p's first
sync is at step ``offset(p) = floor((p + 1) * H / P)`` so syncs are spread
evenly over the H steps (paper: P = H = 24, one fragment per step); without
it (synchronous DiLoCo, data-parallel) every fragment syncs at steps H, 2H, ...

The merged fragment is due back τ steps after its sync started
(``apply_step``); a learner keeps stepping meanwhile.

Steps are 1-based: "after inner step s" means s steps have been taken.

Example:
    >>> s = FragmentSchedule(num_fragments=4, sync_every=4, overlap_steps=2, staggered=True)
    >>> [s.due(step) for step in range(1, 9)]
    [(0,), (1,), (2,), (3,), (0,), (1,), (2,), (3,)]
    >>> s.apply_step(5)
    7
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FragmentSchedule:
    """Staggered (or aligned) schedule of P fragments over H inner steps with overlap τ."""

    num_fragments: int
    sync_every: int
    overlap_steps: int
    staggered: bool = True

    def __post_init__(self) -> None:
        if self.num_fragments < 1:
            raise ValueError(f"num_fragments must be >= 1, got {self.num_fragments}")
        if self.sync_every < 1:
            raise ValueError(f"sync_every (H) must be >= 1, got {self.sync_every}")
        if self.overlap_steps < 0:
            raise ValueError(f"overlap_steps (tau) must be >= 0, got {self.overlap_steps}")

    def offset(self, fragment: int) -> int:
        """Step (1..H) of fragment's first sync."""
        if not 0 <= fragment < self.num_fragments:
            raise ValueError(f"fragment {fragment} out of range 0..{self.num_fragments - 1}")
        if not self.staggered:
            return self.sync_every
        return max(1, ((fragment + 1) * self.sync_every) // self.num_fragments)

    def due(self, step: int) -> tuple[int, ...]:
        """Fragments whose sync starts right after inner step ``step``."""
        if step < 1:
            return ()
        return tuple(
            p
            for p in range(self.num_fragments)
            if step >= self.offset(p) and (step - self.offset(p)) % self.sync_every == 0
        )

    def apply_step(self, sync_step: int) -> int:
        """Step after which a fragment whose sync started at ``sync_step`` is due back."""
        return sync_step + self.overlap_steps
