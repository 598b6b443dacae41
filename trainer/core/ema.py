"""Exponential moving averages, as an immutable value.

Example:
    >>> e = Ema(alpha=0.5).update(2.0).update(4.0)
    >>> e.value
    3.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Ema:
    """EMA with weight ``alpha`` on the newest sample; ``value`` is None before the first."""

    alpha: float = 0.2
    value: float | None = None

    def update(self, sample: float) -> Ema:
        if self.value is None:
            return replace(self, value=float(sample))
        return replace(self, value=(1 - self.alpha) * self.value + self.alpha * float(sample))

    def get(self, default: float = 0.0) -> float:
        return default if self.value is None else self.value
