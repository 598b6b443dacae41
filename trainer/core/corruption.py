"""What a broken learner sends instead of its update: the ``corrupt`` fault's payloads, shared by the real learner
(``--corrupt``) and deterministic mode."""

from __future__ import annotations

import numpy as np

CORRUPT_MODES = ("nan", "garbage")


def corrupted(arrays: dict[str, np.ndarray], mode: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """What a broken learner would send instead of ``arrays`` (fault injection for chaos tests).

    ``nan`` fills every value with NaN (a diverged learner); ``garbage`` sends
    random bit patterns of the right shape and dtype with the non-finite ones
    zeroed (corrupted memory that passes a NaN check: absurd magnitudes, which
    only the outlier-norm guard stands against; with NaN left in, a real
    fragment's ~10⁴ values always held one, so a real run never reached that guard).

    >>> out = corrupted({"w": np.zeros(3, np.float32)}, "nan", np.random.default_rng(0))
    >>> bool(np.isnan(out["w"]).all())
    True
    >>> g = corrupted({"w": np.zeros(100_000, np.float32)}, "garbage", np.random.default_rng(0))["w"]
    >>> bool(np.isfinite(g).all()), bool(np.abs(g).max() > 1e30)
    (True, True)
    """
    if mode == "nan":
        return {n: np.full_like(a, np.nan) for n, a in arrays.items()}
    if mode == "garbage":
        bits = {
            n: rng.integers(0, 256, a.nbytes, dtype=np.uint8).view(a.dtype).reshape(a.shape)
            for n, a in arrays.items()
        }
        return {
            n: np.where(np.isfinite(b), b, np.zeros_like(b)) if np.issubdtype(b.dtype, np.floating) else b
            for n, b in bits.items()
        }
    raise ValueError(f"unknown corrupt mode {mode!r}; expected one of {CORRUPT_MODES}")
