"""The system-under-test boundary: what evidence each check needs, and what a system under test provides
(docs/testing-your-trainer.md).

A check judges from evidence a system under test (SUT) writes or the harness records; an SUT that cannot give a
check its evidence gets that check's verdict **not applicable**, with the SUT's reason — never a pass. Our trainer
provides every kind (:data:`OURS`); another declares what it provides and why not the rest (``peers/``).

    >>> torchft = SystemUnderTest("torchft", frozenset({"merges", "learner_logs"}),
    ...                           {"checkpoints": "a healing group copies a live peer's state"})
    >>> torchft.lacks("durability")
    {'checkpoints': "a healing group copies a live peer's state", 'syncer_evals': 'not provided'}
    >>> OURS.lacks("audit")
    {}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

Evidence = Literal[
    "merges",  # merge events: when each fragment's global value changed, and whose contributions it took
    "learner_logs",  # the units' own events: starts, joins, syncs, applies, steps, stops (docs/events.md)
    "uploads",  # the coordinator's upload / reject events: each contribution received and what became of it
    "syncer_evals",  # the coordinator's evals of the global model (the final one: the run's result)
    "checkpoints",  # checkpoint and restore events, with digests of what was kept
    "kept_merges",  # merge inputs kept whole (the audit's files) and the run's initial state
    "fault_free_band",  # the same SUT's fault-free runs of the scenario's cluster (parity's band)
    "reference_run",  # our synchronous DiLoCo on the same cluster (the reference check)
]
EVIDENCE: tuple[Evidence, ...] = get_args(Evidence)

# What each check reads (chaos/checkers/*): it runs only where all of it is provided.
NEEDS: dict[str, frozenset[Evidence]] = {
    "liveness": frozenset({"merges"}),
    "reintegration": frozenset({"merges"}),
    "parity": frozenset({"syncer_evals", "fault_free_band"}),
    "reference": frozenset({"syncer_evals", "reference_run"}),
    "durability": frozenset({"merges", "checkpoints", "syncer_evals"}),
    "safety": frozenset({"syncer_evals", "checkpoints", "uploads"}),
    "goodput": frozenset({"uploads", "learner_logs"}),
    "audit": frozenset({"merges", "kept_merges", "checkpoints", "learner_logs"}),
    "ledger": frozenset({"uploads", "learner_logs", "checkpoints"}),
}


@dataclass(frozen=True)
class SystemUnderTest:
    """A trainer under the harness: its name, the evidence it provides, and why not the rest (by kind)."""

    name: str
    provides: frozenset[Evidence]
    why_not: Mapping[Evidence, str] = field(default_factory=dict)

    def lacks(self, check: str) -> dict[str, str]:
        """The evidence ``check`` needs that this SUT does not provide, each with its reason (empty: it runs)."""
        return {e: self.why_not.get(e, "not provided") for e in sorted(NEEDS[check] - self.provides)}


OURS = SystemUnderTest("diloco-chaos trainer", frozenset(EVIDENCE))
