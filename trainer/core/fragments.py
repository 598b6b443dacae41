"""Balanced tensor fragmentation: whole tensors packed into P near-equal groups.

Greedy bin-packing, largest tensor first, each into the currently lightest
fragment (ties broken by fragment index, tensors of equal size by name), so the
result is a deterministic function of the tensor sizes.

Example:
    >>> frags = partition_tensors({"a": 6, "b": 5, "c": 4, "d": 3}, 2)
    >>> [f.names for f in frags]
    [('a', 'd'), ('b', 'c')]
    >>> [f.size for f in frags]
    [9, 9]
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from trainer.errors import TrainerError


class FragmentationError(TrainerError, ValueError):
    """The tensors cannot be split as asked (e.g. more fragments than tensors)."""


@dataclass(frozen=True)
class Fragment:
    """One fragment: an index, the names of its tensors (sorted) and its element count."""

    index: int
    names: tuple[str, ...]
    size: int


def partition_tensors(sizes: Mapping[str, int], num_fragments: int) -> tuple[Fragment, ...]:
    """Pack tensors (name -> element count) into ``num_fragments`` balanced fragments."""
    if num_fragments < 1:
        raise FragmentationError(f"num_fragments must be >= 1, got {num_fragments}")
    if num_fragments > len(sizes):
        raise FragmentationError(
            f"num_fragments={num_fragments} exceeds the number of tensors ({len(sizes)}): "
            "every fragment needs at least one whole tensor; lower num_fragments"
        )
    # Keyed (holds a tensor, load, index): an empty fragment is filled first even when zero-size tensors
    # leave a filled one at load 0 (with positive sizes this is plain lightest-first).
    heap: list[tuple[int, int, int]] = [(0, 0, i) for i in range(num_fragments)]
    members: list[list[str]] = [[] for _ in range(num_fragments)]
    loads = [0] * num_fragments
    for name, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        _, load, idx = heapq.heappop(heap)
        members[idx].append(name)
        loads[idx] = load + size
        heapq.heappush(heap, (1, loads[idx], idx))
    return tuple(Fragment(index=i, names=tuple(sorted(members[i])), size=loads[i]) for i in range(num_fragments))


def imbalance(fragments: tuple[Fragment, ...]) -> float:
    """Largest fragment size over the mean size (1.0 is perfect balance)."""
    total = sum(f.size for f in fragments)
    return max(f.size for f in fragments) * len(fragments) / total if total else 1.0
