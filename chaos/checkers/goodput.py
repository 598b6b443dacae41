"""Compute goodput: the fraction of learner compute (tokens trained) that ended up in merges.

One of three goodput figures, each with its own name (``docs/design.md``, "Words"): this one needs no clock. It is
≤ 100% by construction (each trained token merged at most once, :mod:`trainer.core.merged_tokens`). Its bound is
derived from the run's fault windows when the fault-free baselines measured theirs: compute the faults did not
touch merges as in a fault-free run, so

    goodput ≥ lowest fault-free goodput × (1 − exposed share) × (1 − NOISE)

where the exposed share is what a fault could cost: each target's tokens from the window's start to its first
upload after the heal (every learner's when the syncer is a target), and :data:`IN_FLIGHT_ROUNDS` rounds of its
steps per window for the work it had not yet synced. ``min`` stays as a floor below which no run passes.
"""

from __future__ import annotations

from chaos.checkers.base import CheckInput, Status, Verdict, first_upload_after, uncovered_seconds
from faults.base import SYNCER
from trainer import events as ev
from trainer.metrics import merged_tokens, trained_tokens


def goodput_of(trained: dict[str, int], merged: dict[str, int]) -> float | None:
    """Compute goodput, the one definition: merged ÷ trained tokens over all learners (None: nobody trained)."""
    total = sum(trained.values())
    return sum(merged.values()) / total if total else None


def compute_goodput(events: list[ev.Event], num_fragments: int) -> float | None:
    """A whole run's compute goodput (:func:`goodput_of`): what the check judges, and what a fault-free baseline
    measured for its bound."""
    return goodput_of(trained_tokens(events), merged_tokens(events, num_fragments))


IN_FLIGHT_ROUNDS = (
    2  # rounds of a learner's steps a fault may catch unsynced (each fragment's since its last sync)
)
NOISE = 0.3  # a run's goodput below its fault-free seeds' lowest by this share, outside faults' reach, fails (real
# built-ins at seed 0 measured 1.23-1.40x the bound at 0.2, 2026-12-04: a loaded machine needs more room)


def exposed_tokens(inp: CheckInput, trained: dict[str, int]) -> dict[str, int]:
    """Per learner, the trained tokens a fault could have cost (see the module docstring), at most all it trained.

    Time stands in for tokens (a learner's share of its training time spent exposed), which over-counts a killed
    learner's (it trains nothing while down): the bound errs low, never high.
    """
    h = inp.history
    learners = inp.facts.learners
    per_round = inp.facts.round_tokens // max(len(learners), 1)
    first = {
        lid: min((e.ts for e in h.of(ev.LearnerStart) if e.learner_id == lid), default=h.start) for lid in learners
    }
    end = inp.training_end
    windows: dict[str, list[tuple[float, float]]] = {lid: [] for lid in learners}
    for w in h.fault_windows():
        if not w.injected:
            continue
        hit = learners if SYNCER in w.targets else tuple(t for t in w.targets if t in windows)
        for lid in hit:
            back = first_upload_after(h, lid, w.end) if w.end is not None else None
            windows[lid].append((w.start, back if back is not None else end))
    out = {}
    for lid in learners:
        span = max(end - first[lid], 1e-9)
        covered_s = span - uncovered_seconds(first[lid], end, windows[lid])
        t = trained.get(lid, 0)
        out[lid] = min(t, round(t * covered_s / span) + IN_FLIGHT_ROUNDS * per_round * len(windows[lid]))
    return out


def derived_min(inp: CheckInput, trained: dict[str, int]) -> tuple[float | None, dict]:
    """The bound the fault windows give (None: no fault-free goodput measured), and how it was derived."""
    if not inp.baseline_goodput:
        return None, {}
    exposed = exposed_tokens(inp, trained)
    share = sum(exposed.values()) / max(sum(trained.values()), 1)
    ref = min(inp.baseline_goodput)
    bound = ref * (1 - share) * (1 - NOISE)
    return bound, {
        "derived_min": round(bound, 4),
        "baseline_goodput": [round(g, 4) for g in inp.baseline_goodput],
        "exposed_share": round(share, 4),
        "exposed_tokens": exposed,
    }


def check_goodput(inp: CheckInput) -> Verdict:
    need = inp.checks.goodput.min
    trained = trained_tokens(inp.history.events)
    merged = merged_tokens(inp.history.events, inp.facts.num_fragments)
    frac = goodput_of(trained, merged)
    if frac is None:
        return Verdict("goodput", "indeterminate", "no learner trained any tokens")
    evidence = {"goodput": round(frac, 4), "min": need, "trained_tokens": trained, "merged_tokens": merged}
    over = sorted(lid for lid, t in merged.items() if t > trained.get(lid, 0))
    if over:  # each trained token is merged at most once: more merged than trained is tokens counted twice
        return Verdict(
            "goodput",
            "fail",
            f"merges took more tokens of {', '.join(over)} than they trained "
            f"({frac:.1%} overall): a contribution's counters spanned tokens already "
            "merged, or counted tokens nobody trained",
            evidence,
        )
    derived, how = derived_min(inp, trained)
    evidence.update(how)
    if derived is not None and derived > need:
        need = derived
        why = (
            f"minimum {need:.1%} = the fault-free runs' lowest {min(inp.baseline_goodput):.1%} × "
            f"(1 − {how['exposed_share']:.1%} exposed to faults) × (1 − {NOISE:g})"
        )
    else:
        why = f"minimum {need:.0%}"
    status: Status = "pass" if frac >= need else "fail"
    return Verdict(
        "goodput", status, f"compute goodput {frac:.1%}: trained tokens merged ÷ trained tokens ({why})", evidence
    )
