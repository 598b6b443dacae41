"""Agreement: every unit that holds a committed version of a fragment holds the same bits.

A system without a central copy of the model (torchft's replica groups all-reduce and each steps its own outer
optimizer) is correct only if every group that committed a step ends it with the same parameters: a group that
skipped healing, trained from stale state or stepped when the others did not has diverged, silently — its loss
still falls. What every unit says it holds after a commit (``apply``: the fragment's value after version ``v``) or
after a state transfer (``state_fetch``: each fragment's version and digest) is grouped by (fragment, version); two
digests for one version fail, naming both holders. Digests are of the bits (:func:`trainer.core.audit.digest`), so
they compare across machines only where the arithmetic is deterministic (one CPU kind: the harness's case).

A version a restart of the whole system made again (training from scratch after every unit was gone) is a new
version with an old number: the check keys versions by the *epoch* they were made in — a unit that joins at version
0 of every fragment after some version was held starts a new one (a join reports the versions it joins at; a unit
joining a live system joins at its current ones). A unit killed mid-run writes no ``learner_stop``, so who is
running is not read from starts and stops.

    >>> from trainer import events as ev
    >>> a = ev.Apply(ts=1, source="g0", fragment=0, version=3, step=9, digest="aa")
    >>> b = ev.Apply(ts=1, source="g1", fragment=0, version=3, step=9, digest="aa")
    >>> agreement([a, b]).status, agreement([a, b.model_copy(update={"digest": "bb"})]).summary
    ('pass', 'fragment 0 v3 (epoch 0): g0 holds aa, g1 holds bb (1 version(s) disagree)')
"""

from __future__ import annotations

from collections.abc import Iterable

from chaos.checkers.base import Verdict
from chaos.records import JsonObject
from trainer import events as ev

SHOWN = 5


def agreement(events: Iterable[ev.Event]) -> Verdict:
    """The verdict over a run's events (module docstring)."""
    held: dict[tuple[int, int, int], dict[str, set[str]]] = {}  # (epoch, fragment, version) -> holder -> digests
    epoch = 0
    for e in sorted(events, key=lambda e: e.ts):
        if isinstance(e, ev.LearnerJoin):
            if held and not any(e.versions):
                epoch += 1
        elif isinstance(e, ev.Apply) and e.digest:
            held.setdefault((epoch, e.fragment, e.version), {}).setdefault(e.source, set()).add(e.digest)
        elif isinstance(e, ev.StateFetch):
            for f, (v, d) in enumerate(zip(e.versions, e.digests)):
                if d:
                    held.setdefault((epoch, f, v), {}).setdefault(e.source, set()).add(d)
    shared = {k: v for k, v in held.items() if len(v) > 1 or any(len(ds) > 1 for ds in v.values())}
    problems = [
        f"fragment {f} v{v} (epoch {ep}): "
        + ", ".join(f"{who} holds {'/'.join(sorted(ds))}" for who, ds in sorted(holders.items()))
        for (ep, f, v), holders in sorted(shared.items())
        if len({d for ds in holders.values() for d in ds}) > 1
    ]
    evidence: JsonObject = {
        "versions": len(held),
        "compared": len(shared),
        "epochs": epoch + 1,
        "disagree": len(problems),
        "from_the_units": "each unit's digest of what it holds (apply, state_fetch): their word, compared across units",
        "first_problems": problems[:SHOWN],
    }
    if problems:
        return Verdict("agreement", "fail", f"{problems[0]} ({len(problems)} version(s) disagree)", evidence)
    if not shared:
        return Verdict(
            "agreement", "indeterminate", "no version was held by two units: nothing to compare", evidence
        )
    return Verdict(
        "agreement", "pass", f"{len(shared)} versions held by two or more units: every one the same bits", evidence
    )
