"""How a learner reacts to the syncer's answers: one pure decision, shared by the process and the simulator.

An upload's reply (or its failure to arrive) decides four things: which
version of the fragment to download next, whether the sync counts as failed
(so the step loop stops waiting for it), whether to join again (the syncer
forgot this learner), and whether to stop (the token budget is reached).

An accepted upload waits for the merge of the round it joined: the fragment's
version when it was accepted, plus one — never ``base + 1``, which for a
learner holding an older version is an earlier merge without its upload.

Example:
    >>> upload_outcome(accepted=True, reason="", base_version=3, current_version=3)
    UploadOutcome(want=4, failed=False, rejoin=False, stop=False)
    >>> upload_outcome(accepted=True, reason="", base_version=2, current_version=3)  # its round makes version 4
    UploadOutcome(want=4, failed=False, rejoin=False, stop=False)
    >>> upload_outcome(accepted=False, reason="stale_version", base_version=1, current_version=5)
    UploadOutcome(want=5, failed=True, rejoin=False, stop=False)
    >>> upload_outcome(accepted=False, reason="late_round", base_version=4, current_version=5)  # take what it missed
    UploadOutcome(want=5, failed=True, rejoin=False, stop=False)
    >>> upload_outcome(accepted=False, reason="unreachable", base_version=1, current_version=-1).failed
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.core.reasons import RejectReason

# The syncer does not know this incarnation (it restarted, or we left): join again.
REJOIN_REASONS = frozenset({RejectReason.UNKNOWN_LEARNER.value, RejectReason.LEFT_LEARNER.value})
UNREACHABLE = "unreachable"  # the reason a learner records when no reply came back
# The fragment moved on without this upload: fetch the newest value.
CATCH_UP_REASONS = frozenset({RejectReason.STALE_VERSION.value, RejectReason.LATE_ROUND.value})


@dataclass(frozen=True)
class UploadOutcome:
    want: int | None  # download the fragment at least at this version (None: nothing new to fetch)
    failed: bool  # the contribution will not be merged: stop waiting for it
    rejoin: bool
    stop: bool


def upload_outcome(accepted: bool, reason: str, base_version: int, current_version: int) -> UploadOutcome:
    """What to do after an upload's reply (``reason`` is ``unreachable`` when none came back)."""
    if accepted:
        return UploadOutcome(max(current_version, base_version) + 1, False, False, False)
    if reason in CATCH_UP_REASONS:
        return UploadOutcome(current_version, True, False, False)  # catch up with what we missed
    return UploadOutcome(None, True, reason in REJOIN_REASONS, reason == RejectReason.FINISHED.value)


def report_outcome(ok: bool, stop: bool, reason: str) -> tuple[bool, bool]:
    """(stop, rejoin) after a progress report's reply."""
    if stop:
        return True, False
    return False, (not ok and reason in REJOIN_REASONS)
