"""Why the syncer refuses something: one stable vocabulary, used in replies, events and status.

Example:
    >>> RejectReason.STALE_VERSION.value
    'stale_version'
"""

from __future__ import annotations

from enum import Enum

MAX_DETAIL = 1000  # characters of a refusal's detail, in replies and events


class RejectReason(str, Enum):  # noqa: UP042 (StrEnum would change str() of a member, which events write)
    MISSING_TOKEN = "missing_token"
    BAD_TOKEN = "bad_token"
    WRONG_LEARNER = "wrong_learner"  # a learner's credential names another learner id
    UNKNOWN_LEARNER = "unknown_learner"
    LEFT_LEARNER = "left_learner"
    STALE_INCARNATION = "stale_incarnation"
    CONFIG_MISMATCH = "config_mismatch"
    UNKNOWN_FRAGMENT = "unknown_fragment"
    STALE_VERSION = "stale_version"
    FUTURE_VERSION = "future_version"
    LATE_ROUND = "late_round"  # the upload's round has merged: it missed that merge
    FUTURE_ROUND = "future_round"  # the upload names a round the syncer's clock has not opened
    BAD_SHAPE = "bad_shape"
    BAD_DTYPE = "bad_dtype"
    NON_FINITE = "non_finite"
    OUTLIER_NORM = "outlier_norm"
    DRIFT = "drift"  # summed over rounds, the learner pulls away from the others (trainer.core.drift)
    BAD_CHECKSUM = "bad_checksum"
    DUPLICATE_CHUNK = "duplicate_chunk"
    OVERSIZE = "oversize"
    TRUNCATED = "truncated"
    MALFORMED = "malformed"
    BAD_COUNTERS = "bad_counters"
    FINISHED = "finished"
    BUSY = "busy"  # a long call over the caller's or the syncer's share (trainer.admission)


class Rejected(Exception):
    """A refusal with its reason and a human-readable detail saying what to do."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        detail = detail if len(detail) <= MAX_DETAIL else detail[:MAX_DETAIL] + "…"  # it may quote hostile input
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
