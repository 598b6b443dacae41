"""Human-sized numbers in plan files and flags: ``7d``, ``1y``, ``500ms``, ``2.4M``, ``12B``, ``5Gbps``.

Example:
    >>> parse_duration("7d"), parse_duration("500ms"), parse_duration(30)
    (604800.0, 0.5, 30.0)
    >>> parse_count("2.4M"), parse_count("150k"), parse_count("12B")
    (2400000.0, 150000.0, 12000000000.0)
    >>> parse_duration("soon")
    Traceback (most recent call last):
    ...
    ValueError: 'soon' is not a duration: write seconds (30) or a number with a unit (ms, s, min, h, d, w, y)
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

DAY = 86_400.0
YEAR = 365 * DAY
_TIME_UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, "y": YEAR}
_COUNT_UNITS = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


_GBPS_UNITS = {"Gbps": 1.0, "Mbps": 1e-3, "Kbps": 1e-6}


def _scaled(value: Any, units: dict[str, float], default: str, what: str, hint: str) -> float:
    """A number, or a number followed by one of ``units`` (``default`` when none is written)."""
    # ValueError, not TypeError, throughout: pydantic turns only ValueError into a field-named message.
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not {what}")
    if isinstance(value, (int, float)):
        return float(value)
    names = "|".join(sorted((u for u in units if u), key=len, reverse=True))
    m = re.fullmatch(_NUMBER + rf"\s*({names})?", str(value).strip())
    if not m:
        raise ValueError(f"{value!r} is not {what}: {hint}")
    return float(m.group(1)) * units[m.group(2) or default]


def parse_duration(value: Any) -> float:
    """Seconds from a number or ``<number><unit>`` (ms, s, min, h, d, w, y = 365 d)."""
    return _scaled(
        value,
        _TIME_UNITS,
        "s",
        "a duration",
        "write seconds (30) or a number with a unit (ms, s, min, h, d, w, y)",
    )


def parse_count(value: Any) -> float:
    """A number, optionally with a k / M / B (= G) / T suffix."""
    return _scaled(value, _COUNT_UNITS, "", "a number", "write 2400000, 2.4M, 150k or 12B")


def parse_gbps(value: Any) -> float:
    """Gbit/s from a number or ``<number>Gbps`` / ``Mbps``; 0 means unlimited.

    Example:
        >>> parse_gbps("200Mbps"), parse_gbps("5Gbps"), parse_gbps(2)
        (0.2, 5.0, 2.0)
    """
    return _scaled(value, _GBPS_UNITS, "Gbps", "a bandwidth", "write Gbit/s (5) or 5Gbps / 200Mbps")


Seconds = Annotated[float, BeforeValidator(parse_duration)]
Count = Annotated[float, BeforeValidator(parse_count)]
Gbps = Annotated[float, BeforeValidator(parse_gbps)]


def format_duration(seconds: float) -> str:
    """The largest unit that keeps the number readable.

    Example:
        >>> format_duration(604800), format_duration(93.2), format_duration(0.25)
        ('7.0 d', '1.6 min', '0.25 s')
    """
    for unit, size in (("y", YEAR), ("d", DAY), ("h", 3600.0), ("min", 60.0)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.3g} s"


def format_count(value: float) -> str:
    """Example:
    >>> format_count(2_400_000), format_count(150_000), format_count(12e9)
    ('2.4M', '150k', '12B')
    """
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"
