"""What a broken learner sends instead of its update: the ``corrupt`` fault's payloads, shared by the real learner
(``--corrupt``) and deterministic mode."""

from __future__ import annotations

import numpy as np

CORRUPT_MODES = ("nan", "garbage")


def corrupted(arrays: dict[str, np.ndarray], mode: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """What a broken learner would send instead of ``arrays`` (fault injection for chaos tests).

    ``nan`` fills every value with NaN (a diverged learner); ``garbage`` sends
    random bit patterns of the right shape and dtype (corrupted memory: mostly
    absurd magnitudes, some NaN/Inf).

    >>> out = corrupted({"w": np.zeros(3, np.float32)}, "nan", np.random.default_rng(0))
    >>> bool(np.isnan(out["w"]).all())
    True
    """
    if mode == "nan":
        return {n: np.full_like(a, np.nan) for n, a in arrays.items()}
    if mode == "garbage":
        return {n: rng.integers(0, 256, a.nbytes, dtype=np.uint8).view(a.dtype).reshape(a.shape)
                for n, a in arrays.items()}
    raise ValueError(f"unknown corrupt mode {mode!r}; expected one of {CORRUPT_MODES}")
