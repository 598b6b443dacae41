"""Which members of a long parametrized test family run on a given night.

The nightly tier cannot run every long member every night (each built-in at
four times its budget takes minutes; parity at full model size, twenty), so a
family marked ``@pytest.mark.chaos_rotate(per_night=k)`` runs a slice of k members a
night, in turn. The night comes from the nightly seed: a seed that reads as a
date (YYYYMMDD, what ``scripts/nightly`` uses) counts days, so consecutive
nights run consecutive slices and every member runs within
``nights_to_cover`` nights; any other seed picks the slice ``seed mod slices``.
A night replays from its seed alone.

    slices = ⌈n / k⌉,   night = day(seed) mod slices,   members = sorted ids [night·k, night·k + k)

Example:
    >>> ids = ["a", "b", "c", "d", "e"]
    >>> tonight(ids, per_night=2, seed=20261203), tonight(ids, per_night=2, seed=20261204)
    (['a', 'b'], ['c', 'd'])
    >>> sorted({i for s in range(20261202, 20261202 + nights_to_cover(5, 2)) for i in tonight(ids, 2, s)}) == ids
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date


def nights_to_cover(members: int, per_night: int) -> int:
    """Consecutive nights after which every member of a family has run once.

    >>> nights_to_cover(14, 2), nights_to_cover(3, 1), nights_to_cover(0, 4)
    (7, 3, 1)
    """
    if per_night < 1:
        raise ValueError(f"chaos_rotate(per_night=...) must be at least 1, got {per_night}")
    return max(math.ceil(members / per_night), 1)


def night_of(seed: int) -> int:
    """The night a seed stands for: its day number when it reads as a date YYYYMMDD, else the seed itself.

    >>> night_of(20261203) - night_of(20261202), night_of(20261201) - night_of(20261130), night_of(7)
    (1, 1, 7)
    """
    y, md = divmod(seed, 10_000)
    if 1970 <= y <= 9999:
        try:
            return date(y, md // 100, md % 100).toordinal()
        except ValueError:
            pass
    return seed


def tonight(ids: Sequence[str], per_night: int, seed: int) -> list[str]:
    """The members of a family (by test id) that run on the night of ``seed``, in sorted order."""
    ordered = sorted(ids)
    k = night_of(seed) % nights_to_cover(len(ordered), per_night)
    return ordered[k * per_night : (k + 1) * per_night]
