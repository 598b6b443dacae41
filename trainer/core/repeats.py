"""Repeated refusals logged once per window: a flood of them costs the event log one line per kind, not one each.

An outsider (no valid credential) can send calls as fast as the network carries them, and each is refused. The
syncer counts every refusal (Status), but logs the first of each kind in a window of ``window_s`` seconds and folds
the rest into the next logged one's ``repeats``, so the run directory grows with time, not with what was received
(docs/security.md, invariant ``output``). Kinds are few by construction (a call name from a closed set and a
reason: trainer.syncer.call_name).

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
"""

from __future__ import annotations

from dataclasses import dataclass, field

Kind = tuple[str, str]  # (call, reason)


@dataclass
class Repeats:
    """Per kind: when the last logged one was, and how many were folded since (not thread-safe: callers lock)."""

    window_s: float
    _logged_at: dict[Kind, float] = field(default_factory=dict)
    _folded: dict[Kind, int] = field(default_factory=dict)

    def admit(self, kind: Kind, now: float) -> int | None:
        """None: fold this one; else log it, with this many folded before it."""
        last = self._logged_at.get(kind)
        if last is not None and now - last < self.window_s:
            self._folded[kind] = self._folded.get(kind, 0) + 1
            return None
        self._logged_at[kind] = now
        return self._folded.pop(kind, 0)

    def drain(self) -> dict[Kind, int]:
        """The folded counts not logged yet (at shutdown), cleared."""
        out, self._folded = self._folded, {}
        return out
