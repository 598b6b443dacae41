"""Uploads in flight: a round takes every upload whose header made it, waiting a bounded time for the bodies.

The paper's syncer waits until K learners have *reported* fragment p, then the
grace window, then "takes fragment p from the learners that made it". What
makes it is the report, not the last byte: an upload's header (who, which
fragment, which round, the counters) crosses a link in one latency, its body
needs the whole transfer. Deciding on the body's arrival made a round miss
uploads that left in time but crossed a slow or busy link for longer than the
grace window (on a 2-core machine, upload calls took 0.05–0.6 s against a
window of ~30 ms; over slow links every body arrives after the opening).

So once a round's merge time ``T`` comes (quorum, grace: :mod:`trainer.core.grace`),
the syncer also waits for the bodies of uploads *announced* — header checked
and accepted — at or before ``T``, but no longer than a hold after each
announcement:

    merge at  max(T, max over announced-by-T bodies still in flight of (announced_at + hold))
    hold    = max(HOLD_UPLOADS · t_upload, t_step)

t_upload is the moving average of upload durations (header to last byte, the
grace window's own input), so the hold covers a body a few times slower than
usual, and at least one step of the cluster's pace. A body that arrives in time
is merged in the round; one that does not is late (the round merged without
it). A learner that sends a header and then stalls costs its round one hold,
never more: the round's merge prunes its announcement.

Example:
    >>> held_merge_time(10.0, announced=[9.5, 9.8], hold_s=0.5)   # bodies announced by 10.0 get until 10.3
    10.3
    >>> held_merge_time(10.0, announced=[10.2], hold_s=0.5)       # announced after T: not waited for
    10.0
    >>> held_merge_time(10.0, announced=[], hold_s=0.5)
    10.0
    >>> hold_seconds(t_upload_s=0.02, t_step_s=0.1), round(hold_seconds(t_upload_s=0.4, t_step_s=0.1), 6)
    (0.1, 1.2)
"""

from __future__ import annotations

from collections.abc import Iterable

HOLD_UPLOADS = 3.0  # a body may take this many times the average upload before its round stops waiting


def hold_seconds(t_upload_s: float, t_step_s: float) -> float:
    """How long after its header a round waits for an announced upload's body."""
    return max(HOLD_UPLOADS * t_upload_s, t_step_s)


def held_merge_time(merge_at: float, announced: Iterable[float], hold_s: float) -> float:
    """The merge time ``merge_at`` pushed back for the bodies of uploads announced at or before it (each at
    most ``hold_s`` after its announcement)."""
    return max([merge_at, *(a + hold_s for a in announced if a <= merge_at)])
