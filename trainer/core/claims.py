"""What a learner claims, bounded by what the syncer knows: counters, step counts and update sizes.

A learner is a unit we expect to fail, so every number it reports is either
derived by the syncer or capped by a bound the syncer can compute itself:

- **tokens** are never taken on trust: a step is ``tokens_per_step`` tokens
  (``inner.batch_size × seq_len``, the run config), so a claim of ``c`` steps
  is ``c × tokens_per_step`` tokens and any other token count is refused;
- **steps** cannot outrun time: in ``elapsed`` seconds at most
  ``max_speedup × elapsed / pace + slack`` steps fit, ``pace`` being the
  cluster's (the lower median over the M configured learners' step times: a
  minority cannot set it). A claim above that is capped there, never refused — an
  honest learner's cumulative counts catch up on its next report;
- **update size**: an inner AdamW step moves each parameter by about ``lr``
  (its normalised step is at most a few units before ``lr``, plus decoupled
  weight decay ``lr·wd·|θ|``), so one step's update of a fragment of ``n``
  numbers is at most ``lr · (ADAM_STEP_BOUND·√n + wd·‖Θ‖)`` — a bound no
  history can steer and that zero updates cannot switch off;
- **the outlier reference** is the median over learners of each one's latest
  *merged* per-step norm, once a majority of the M learners has one: one value
  per learner, so no single learner can move it by sending many tiny, zero or
  huge updates.

Example:
    >>> steps_possible(elapsed_s=2.0, pace_s=0.05, max_speedup=8.0, slack=4)
    324
    >>> steps_possible(elapsed_s=2.0, pace_s=None, max_speedup=8.0, slack=4) is None
    True
    >>> round(adam_step_norm_bound(lr=1e-3, numel=10_000, weight_decay=0.1, param_norm=5.0), 6)
    1.0005
    >>> reference_norm({"a": 1.0, "b": 2.0, "rogue": 0.0}, num_learners=4), reference_norm({"rogue": 0.0}, 3)
    (1.0, None)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from trainer.core.reasons import Rejected, RejectReason

MAX_COUNT = 2**53  # every counter below this: exact in a float and JSON, and sums stay far inside int64
MAX_NAME = 128  # characters of a learner id or incarnation: ids are names, not payloads
MAX_STEP_TIME_S = 3600.0  # a reported step time above an hour is not a step time
ADAM_STEP_BOUND = 10.0  # |m̂ / (√v̂ + ε)| per coordinate stays below ~1 in practice; 10 leaves room


def check_count(name: str, value: int) -> int:
    """A non-negative integer counter below :data:`MAX_COUNT`, or :class:`Rejected` naming the field.

    >>> check_count("c_steps", 3)
    3
    >>> check_count("tokens", 2**62)
    Traceback (most recent call last):
    ...
    trainer.core.reasons.Rejected: bad_counters: tokens=4611686018427387904 is out of range: a counter is an integer in 0..2^53
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_COUNT:
        raise Rejected(
            RejectReason.BAD_COUNTERS, f"{name}={value} is out of range: a counter is an integer in 0..2^53"
        )
    return value


def check_name(name: str, value: str) -> str:
    """A learner id or incarnation: 1..:data:`MAX_NAME` printable characters, or :class:`Rejected` naming the field.

    >>> check_name("learner_id", "learner-0")
    'learner-0'
    >>> check_name("incarnation", "a\x85b")
    Traceback (most recent call last):
    ...
    trainer.core.reasons.Rejected: malformed: incarnation must be 1..128 printable characters, got 'a\x85b'
    """
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME or not value.isprintable():
        raise Rejected(
            RejectReason.MALFORMED, f"{name} must be 1..{MAX_NAME} printable characters, got {value[:MAX_NAME]!r}"
        )
    return value


def check_step_time(value: float) -> float:
    """A finite step time in 0..:data:`MAX_STEP_TIME_S` seconds (0: not measured yet)."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= MAX_STEP_TIME_S):
        raise Rejected(
            RejectReason.BAD_COUNTERS,
            f"step_time_s={value} must be a finite number of seconds in 0..{MAX_STEP_TIME_S:g}",
        )
    return float(value)


def check_tokens(steps: int, tokens: int, tokens_per_step: int, what: str) -> None:
    """Tokens are steps × tokens_per_step (the run config), not the learner's to choose (0: not checked).

    >>> check_tokens(3, 6144, 2048, "upload")
    >>> check_tokens(3, 2**40, 2048, "upload")
    Traceback (most recent call last):
    ...
    trainer.core.reasons.Rejected: bad_counters: upload claims 1099511627776 tokens for 3 steps; a step is 2048 tokens in this run's config (inner.batch_size × seq_len)
    """
    if tokens_per_step and tokens != steps * tokens_per_step:
        raise Rejected(
            RejectReason.BAD_COUNTERS,
            f"{what} claims {tokens} tokens for {steps} steps; a step is {tokens_per_step} tokens in this "
            "run's config (inner.batch_size × seq_len)",
        )


def steps_possible(elapsed_s: float, pace_s: float | None, max_speedup: float, slack: int) -> int | None:
    """The most steps a learner can have taken in ``elapsed_s``: ``max_speedup`` × the cluster's pace, + slack.

    None when the cluster has no pace yet (nobody has reported a step time): then only the counters' ranges bound
    a claim.
    """
    if pace_s is None or not (math.isfinite(pace_s) and pace_s > 0) or max_speedup <= 0:
        return None
    return int(max_speedup * max(elapsed_s, 0.0) / pace_s) + slack


def adam_step_norm_bound(lr: float, numel: int, weight_decay: float, param_norm: float) -> float:
    """The largest norm one inner AdamW step can give a fragment of ``numel`` numbers whose norm is ``param_norm``."""
    return lr * (ADAM_STEP_BOUND * math.sqrt(numel) + weight_decay * param_norm)


def reference_norm(latest_by_learner: Mapping[str, float], num_learners: int) -> float | None:
    """The median of each learner's latest merged per-step norm, once a majority of the ``num_learners`` has one
    (None before: a minority alone would set it)."""
    values = [v for v in latest_by_learner.values() if math.isfinite(v)]
    return float(statistics.median(values)) if values and len(values) > num_learners // 2 else None
