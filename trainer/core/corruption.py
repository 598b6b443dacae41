"""What a broken learner sends instead of its update: the ``corrupt`` fault's payloads, shared by the real learner
(``--corrupt``) and deterministic mode."""

from __future__ import annotations

import numpy as np

CORRUPT_MODES = ("nan", "garbage", "push")
PUSH_FRACTION = 0.5  # of the most an upload's steps may move a coordinate (invariant value): always accepted alone


def corrupted(
    arrays: dict[str, np.ndarray], mode: str, rng: np.random.Generator, bound: float = 0.0
) -> dict[str, np.ndarray]:
    """What a broken learner would send instead of ``arrays`` (fault injection for chaos tests).

    ``nan`` fills every value with NaN (a diverged learner); ``garbage`` sends
    random bit patterns of the right shape and dtype with the non-finite ones
    zeroed (corrupted memory that passes a NaN check: absurd magnitudes, which
    only the outlier-norm guard stands against; with NaN left in, a real
    fragment's ~10⁴ values always held one, so a real run never reached that guard);
    ``push`` sends the real update with the first coordinate of every tensor set to
    :data:`PUSH_FRACTION` of ``bound`` (the most the upload's steps may move one
    coordinate), the same way every round: each upload passes every per-round check,
    and only their sum shows (invariant ``drift``).

    >>> out = corrupted({"w": np.zeros(3, np.float32)}, "nan", np.random.default_rng(0))
    >>> bool(np.isnan(out["w"]).all())
    True
    >>> g = corrupted({"w": np.zeros(100_000, np.float32)}, "garbage", np.random.default_rng(0))["w"]
    >>> bool(np.isfinite(g).all()), bool(np.abs(g).max() > 1e30)
    (True, True)
    >>> corrupted({"w": np.array([0.1, 0.2], np.float32)}, "push", np.random.default_rng(0), bound=0.04)["w"].tolist()
    [0.019999999552965164, 0.20000000298023224]
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
    if mode == "push":
        out = {n: np.array(a, copy=True) for n, a in arrays.items()}
        for a in out.values():
            if a.size:
                a.reshape(-1)[0] = PUSH_FRACTION * bound
        return out
    raise ValueError(f"unknown corrupt mode {mode!r}; expected one of {CORRUPT_MODES}")
