"""Repeated refusals logged a few per window: a flood of them costs the event log a few lines per kind, not one each.

Anyone can send calls as fast as the network carries them, and a refused one costs the sender little. The syncer
counts every refusal (Status), but logs the first ``burst`` of each kind in a window of ``window_s`` seconds and
folds the rest into the next logged one's ``repeats``, so the run directory grows with time, not with what was
received (docs/security.md, invariant ``output``). Kinds are few by construction: for callers without a
credential a call name from a closed set (trainer.syncer.call_name) and a reason (``burst`` 1); for learners also
the learner id, which only a credential names (``burst`` a few, so that an honest learner's occasional refusals
are each logged).

Example:
    >>> r = Repeats(window_s=10.0)
    >>> r.admit(("Join", "bad_token"), now=0.0), r.admit(("Join", "bad_token"), now=1.0)
    (0, None)
    >>> r.admit(("Join", "bad_token"), now=2.0), r.admit(("Join", "missing_token"), now=2.0)
    (None, 0)
    >>> r.admit(("Join", "bad_token"), now=10.0)     # a new window: logged, carrying the two folded
    2
    >>> r.admit(("Join", "bad_token"), now=11.0), r.drain()
    (None, {('Join', 'bad_token'): 1})
    >>> b = Repeats(window_s=10.0, burst=2)
    >>> [b.admit(("L0", "Upload", "late_round"), now=t) for t in (0.0, 1.0, 2.0, 3.0, 10.0)]
    [0, 0, None, None, 2]

A logged one that fills its window's burst says for how long the next of its kind are folded (``folds_for``), so
that a reader of the log knows which refusals may stand only in a folded count — lost, if the process is killed
before it logs one:

    >>> c = Repeats(window_s=10.0, burst=2)
    >>> c.admit(("L0", "Upload", "late_round"), now=0.0), c.folds_for(("L0", "Upload", "late_round"), now=0.0)
    (0, 0.0)
    >>> c.admit(("L0", "Upload", "late_round"), now=4.0), c.folds_for(("L0", "Upload", "late_round"), now=4.0)
    (0, 6.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

Kind = tuple[str, ...]  # (call, reason), or (learner id, call, reason)


@dataclass
class Repeats:
    """Per kind: when the last logged one was, and how many were folded since (not thread-safe: callers lock)."""

    window_s: float
    burst: int = 1  # logged per kind and window
    _window: dict[Kind, tuple[float, int]] = field(default_factory=dict)  # kind -> (window start, logged in it)
    _folded: dict[Kind, int] = field(default_factory=dict)

    def admit(self, kind: Kind, now: float) -> int | None:
        """None: fold this one; else log it, with this many folded before it."""
        start, logged = self._window.get(kind, (None, 0))
        if start is None or now - start >= self.window_s:
            self._window[kind] = (now, 1)
            return self._folded.pop(kind, 0)
        if logged < self.burst:
            self._window[kind] = (start, logged + 1)
            return self._folded.pop(kind, 0)
        self._folded[kind] = self._folded.get(kind, 0) + 1
        return None

    def folds_for(self, kind: Kind, now: float) -> float:
        """Seconds from ``now`` during which the next of ``kind`` are folded: 0 while its window's burst has room."""
        start, logged = self._window.get(kind, (None, 0))
        if start is None or logged < self.burst:
            return 0.0
        return max(0.0, start + self.window_s - now)

    def drain(self) -> dict[Kind, int]:
        """The folded counts not logged yet (logged with the run's result and at shutdown), cleared."""
        out, self._folded = self._folded, {}
        return out
