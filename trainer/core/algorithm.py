"""The algorithm's settings, resolved once: the run config's ``algorithm`` section as every part reads it.

A user writes only what differs from the mode's defaults; :class:`Algorithm` fills the rest from the mode's
preset while it validates (:data:`PRESETS`, :data:`REQUIRED`), refuses contradictions, and is frozen. No setting
is left unset afterwards, so no consumer re-derives a default (``min_quorum or 1``): the syncer, the learners,
deterministic mode, the scale simulator, the CLI and the checkers all read the same record, with one name per
setting from YAML to merge. It owns the two objects built from it: its :attr:`~Algorithm.quorum` (minimum
quorum and the grace window) and its :meth:`~Algorithm.fragment_schedule`.

=============  ===========  ============  ==========  =========  =========  ========  =======
mode           min_quorum   grace         staggered   overlap τ  blocking   H         rounds
=============  ===========  ============  ==========  =========  =========  ========  =======
decoupled      1 (any)      on            yes         auto (2)   no         any       clock
sync-diloco    M            off           no          0          yes        any       arrival
data-parallel  M            off           no          0          yes        1         arrival
=============  ===========  ============  ==========  =========  =========  ========  =======

Every DiLoCo mode uses DiLoCo's outer optimizer: Nesterov, lr 0.7, momentum 0.9. Decoupled mode runs its rounds
on the syncer's step clock (one merge per scheduled round, contributions anchored at the round's start; see
:mod:`trainer.core.syncer_state`) and accepts contributions whose base is up to ``max_staleness`` versions old
(default M); the synchronous modes only the current version. ``rounds: arrival`` with ``outer_gradient: base`` and
outer momentum 0.5 is the decoupled trainer before rounds existed, kept as a negative control. data-parallel is
gradient averaging: every step each learner uploads its gradient, the syncer applies one AdamW update (the
``inner`` settings) to their mean and every learner receives the same parameters; it has one fragment unless
``num_fragments`` says otherwise (then each fragment is clipped by its own norm).

Example:
    >>> a = Algorithm.model_validate({"mode": "sync-diloco", "num_learners": 3})
    >>> (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking, a.rounds)
    (3, False, False, 0, True, 'arrival')
    >>> Algorithm(min_quorum=2).quorum.min_quorum, Algorithm().fragment_schedule().num_fragments
    (2, 4)
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.grace import QuorumPolicy
from trainer.core.merge import Weighting

__all__ = [
    "Algorithm",
    "Mode",
    "MODES",
    "AUTO_OVERLAP_FLOOR",
    "presets",
]

Mode = Literal["decoupled", "sync-diloco", "data-parallel"]
MODES: tuple[str, ...] = ("decoupled", "sync-diloco", "data-parallel")
AUTO_OVERLAP_FLOOR = 2  # overlap_steps: auto never assumes a round trip shorter than the paper's τ


def presets(mode: str, m: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The mode's ``(defaults, required)`` for ``m`` learners: what fills an unset setting, and what a setting
    must be in this mode (set or not).

    >>> presets("sync-diloco", 4)[1]["min_quorum"], presets("decoupled", 4)[0]["max_staleness"]
    (4, 4)
    """
    common = {"num_fragments": 4, "sync_every": 8, "merge_rule": "rda", "outer_gradient": "base"}
    if mode == "decoupled":
        return {
            **common,
            "min_quorum": 1,
            "grace": True,
            "staggered": True,
            "overlap_steps": "auto",
            "blocking": False,
            "outer_lr": 0.7,
            "outer_momentum": 0.9,
            "max_staleness": m,
            "rounds": "clock",
        }, {}
    synchronous = {
        "min_quorum": m,
        "grace": False,
        "staggered": False,
        "overlap_steps": 0,
        "blocking": True,
        "max_staleness": 0,
        "rounds": "arrival",
    }
    if mode == "sync-diloco":  # DiLoCo's plain mean (rda: a variant)
        return {**common, "outer_lr": 0.7, "outer_momentum": 0.9, "merge_rule": "mean"}, synchronous
    # data-parallel: gradients averaged every step, one AdamW step (inner.*) at the syncer, one fragment (clipping
    # by the gradient's global norm, as one AdamW does). No Nesterov outer step: its lr and momentum are 0.
    return {**common, "num_fragments": 1}, {
        **synchronous,
        "sync_every": 1,
        "merge_rule": "mean",
        "mix_alpha": None,
        "outer_lr": 0.0,
        "outer_momentum": 0.0,
    }


class Algorithm(BaseModel):
    """Decoupled DiLoCo's settings (and its baselines'), every one set: the mode's preset fills what is unset."""

    # No NaN or infinity: a duration, bound or rate of inf/nan is never what a user meant.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Mode = "decoupled"
    num_learners: int = Field(3, ge=1, description="M, learners the run is sized for")
    num_fragments: int = Field(4, ge=1, description="P (default 4; data-parallel 1)")
    sync_every: int = Field(8, ge=1, description="H, inner steps between two syncs of a fragment (default 8)")
    overlap_steps: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        "auto",
        description="tau, steps a merged fragment may take to come back; decoupled default 'auto': sized to "
        "the measured round trip (trainer.core.grace.effective_overlap), at least 2 (the paper's)",
    )
    min_quorum: int = Field(1, ge=1, description="K (decoupled default 1; the synchronous modes M)")
    grace: bool = Field(True, description="the adaptive grace window (decoupled default on)")
    grace_gamma: float = Field(0.5, ge=0, lt=1)
    grace_cap_steps: float = Field(
        1.0,
        ge=0,
        description="the grace window's cap in steps of the cluster's pace (the paper: at most about one step)",
    )
    grace_waits_for: Literal["active", "heard"] = Field(
        "active",
        description="whom a round's grace window waits for: every active learner (heard within the liveness "
        "timeout), or only those heard within the last three report intervals (trainer.core.grace.waited_for)",
    )
    staggered: bool = True
    merge_rule: Literal["rda", "mean"] = Field(
        "rda",
        description="rda | mean for every tensor but embedding tables (always mean); decoupled default rda, "
        "sync-diloco default mean (DiLoCo's), data-parallel mean",
    )
    weighting: Weighting = Field(
        "tokens",
        description="a contribution's merge weight: tokens (the paper's c_tokens² / c_steps) or uniform (equal; "
        "an ablation)",
    )
    outer_lr: float = Field(0.7, ge=0, description="Nesterov's lr (data-parallel: 0, it steps AdamW instead)")
    outer_momentum: float = Field(0.9, ge=0, lt=1)
    nesterov: bool = True
    # The one setting whose absence is a choice, not a default to fill: no mixing at all.
    mix_alpha: float | None = Field(
        None, ge=0, lt=1, description="None: overwrite on receipt; else keep alpha of local"
    )
    blocking: bool = False
    max_staleness: int = Field(3, ge=0, description="versions a contribution's base may lag; decoupled default M")
    rounds: Literal["clock", "arrival"] = Field(
        "clock",
        description="clock (decoupled default): round r of fragment p opens at offset(p) + r*H steps of the "
        "syncer's step clock and merges exactly once; arrival: the first upload after a merge opens "
        "a round (the synchronous modes, and the negative control for decoupled)",
    )
    late_uploads: Literal["refuse", "carry"] = Field(
        "refuse",
        description="rounds=clock: an upload for a round that has merged is refused (the paper: it misses "
        "that merge) or carried into the fragment's next round, anchored at its start value",
    )
    wire_format: Literal["float32", "bfloat16", "int8", "int4"] = Field(
        "float32",
        description="how learners send what they upload (outer gradients; data-parallel: gradients): fp32, bf16, "
        "or int8 / int4 codes with an fp32 scale per 256 values (trainer.core.wire_formats); the syncer decodes to "
        "fp32 and accepts only this format",
    )
    outer_gradient: Literal["base", "current"] = Field(
        "current",
        description="rounds=arrival only (rounds=clock always anchors at the round's start value): base "
        "(default) merges uploads as computed, against the global value the learner last received; "
        "current rebases a late upload onto the fragment's current value",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_from_mode(cls, data: Any) -> Any:
        """The mode's preset fills every setting left unset (absent or null); a setting the mode requires must
        not be given otherwise. Runs on the input, so the record is built once and never patched afterwards."""
        if not isinstance(data, dict):
            return data
        mode, m = data.get("mode", "decoupled"), data.get("num_learners", 3)
        if mode not in MODES or not isinstance(m, int) or isinstance(m, bool) or m < 1:
            return data  # field validation names what is wrong
        defaults, required = presets(mode, m)
        if mode == "decoupled" and data.get("rounds") in (None, "clock"):
            if data.get("outer_gradient") == "base":
                raise ValueError(
                    "rounds 'clock' anchors every contribution at its round's start value "
                    "(outer_gradient current); outer_gradient 'base' needs rounds 'arrival'"
                )
            required = {"outer_gradient": "current"}
        if mode == "data-parallel" and any(data.get(k) not in (None, 0) for k in ("outer_lr", "outer_momentum")):
            raise ValueError(
                "mode 'data-parallel' applies the inner AdamW (inner.*) to the mean gradient at the "
                "syncer: outer_lr and outer_momentum do not apply, leave them unset"
            )
        filled = dict(data)
        for name, value in required.items():
            given = filled.get(name)
            if given is not None and given != value:
                raise ValueError(f"mode {mode!r} requires {name} = {value}, got {given}")
            filled[name] = value
        for name, value in defaults.items():
            if filled.get(name) is None:
                filled[name] = value
        return filled

    @model_validator(mode="after")
    def _consistent(self) -> Algorithm:
        if self.min_quorum > self.num_learners:
            raise ValueError(f"min_quorum ({self.min_quorum}) cannot exceed num_learners ({self.num_learners})")
        if self.mode != "data-parallel" and self.outer_lr <= 0:
            raise ValueError(f"outer_lr must be > 0 in mode {self.mode!r}, got {self.outer_lr}")
        return self

    @property
    def overlap_auto(self) -> bool:
        """τ follows the measured round trip (``overlap_steps: auto``)."""
        return self.overlap_steps == "auto"

    @property
    def overlap_floor(self) -> int:
        """τ in steps as the schedule uses it: the configured one, or with ``auto`` its floor, the paper's 2 (a
        learner applies a result when it arrives, and never before this many steps after its sync started)."""
        return AUTO_OVERLAP_FLOOR if self.overlap_steps == "auto" else int(self.overlap_steps)

    @property
    def clocked(self) -> bool:
        """Rounds run on the syncer's step clock (``rounds: clock``), not one per arrival group."""
        return self.rounds == "clock"

    @property
    def rebases(self) -> bool:
        """Contributions are anchored at the value the merge applies to (always, on the clock)."""
        return self.clocked or self.outer_gradient == "current"

    @functools.cached_property
    def quorum(self) -> QuorumPolicy:
        """Minimum quorum and the grace window's parameters, as the syncer and both simulators use them.

        >>> Algorithm(mode="decoupled", num_learners=4).quorum.min_quorum
        1
        """
        return QuorumPolicy(
            self.min_quorum,
            self.grace,
            self.grace_gamma,
            self.grace_cap_steps,
            self.overlap_floor,
            self.overlap_auto,
        )

    def fragment_schedule(self) -> FragmentSchedule:
        """When each fragment syncs and may apply its result: the one schedule the learner, the syncer and the
        scale simulator all read (P fragments every H steps, staggered or not, τ its floor).

        >>> Algorithm(num_fragments=2, sync_every=4).fragment_schedule().offset(0)
        2
        """
        return FragmentSchedule(self.num_fragments, self.sync_every, self.overlap_floor, self.staggered)
