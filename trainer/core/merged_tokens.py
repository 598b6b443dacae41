"""How many trained tokens one merged contribution stands for: its ``c_tokens`` ÷ the number of fragments P.

A contribution's ``c_tokens`` counts the tokens since *that fragment's* last sync, so every trained token is
contributed once per fragment; divided by P, merged tokens compare with trained tokens (compute goodput,
``docs/design.md``). One home for the formula: the goodput check and the syncer's metrics both use it.

Example:
    >>> merged_share(c_tokens=512, num_fragments=4)
    128
"""

from __future__ import annotations


def merged_share(c_tokens: int, num_fragments: int) -> int:
    return c_tokens // max(num_fragments, 1)
