"""How many trained tokens merges took: each token counted once, so merged ≤ trained by construction.

A contribution's ``c_tokens`` counts the tokens since the learner last received *that fragment* (its base version):
every trained token is contributed once per fragment, so tokens are counted per fragment and divided by the number
of fragments P. Two contributions of one incarnation from the same base (a learner that missed a round's result
syncs again from that base for the next round) cover nested spans — the second holds the first's tokens and more —
so a (learner incarnation, fragment, base) counts the largest merged ``c_tokens``, not their sum; spans of
different bases are disjoint (a receipt resets the counters). Summing ``c_tokens`` instead counted re-sent tokens
twice, and compute goodput could pass 100%. One home for the rule: the goodput check and the syncer's metrics.

Example:
    >>> m = MergedTokens(num_fragments=4)
    >>> m.add("l0", "inc", fragment=0, base_version=3, c_tokens=512)       # 512 ÷ 4
    128
    >>> m.add("l0", "inc", fragment=0, base_version=3, c_tokens=768)       # the same span and 256 more
    64
    >>> m.add("l0", "inc", fragment=0, base_version=4, c_tokens=256), m.per_learner
    (64, {'l0': 256})
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MergedTokens:
    """Merged tokens per learner, each trained token once (see the module's docstring)."""

    num_fragments: int
    per_learner: dict[str, int] = field(default_factory=dict)
    _spans: dict[tuple[str, str, int, int], int] = field(
        default_factory=dict
    )  # (id, inc, fragment, base) -> tokens

    def add(self, learner_id: str, incarnation: str, fragment: int, base_version: int, c_tokens: int) -> int:
        """Count one merged contribution; returns the trained tokens it newly merged (its share of them)."""
        key = (learner_id, incarnation, fragment, base_version)
        before = self._spans.get(key, 0)
        if c_tokens <= before:
            return 0
        self._spans[key] = c_tokens
        p = max(self.num_fragments, 1)
        new = c_tokens // p - before // p
        self.per_learner[learner_id] = self.per_learner.get(learner_id, 0) + new
        return new
