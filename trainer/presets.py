"""System-under-test presets: one switch from the per-change tiny runs to real text at sizes where quality and state
size matter.

A preset overrides a run's cluster settings (a :class:`trainer.config.RunConfig` tree); the scenario's faults and
checks stay as written, and ``--set`` still wins over it. The CLI takes ``--preset NAME`` or ``DILOCO_PRESET``
(``DILOCO_PRESET=small scripts/main`` runs the main job on it); benchmarks apply it with :func:`apply`.

=====  ==============================================================================================================
tiny   the scenario as written: 0.1M parameters on a synthetic Markov source (the per-change tests)
small  3.3M parameters on the real-text corpus, 1.5M tokens: one built-in chaos run in about 6 minutes on 2 cores
wide   6.6M parameters (53 MB of parameters and outer momentum) on real text, 0.5M tokens: state transfer,
       checkpoints and restarts at a size that takes measurable time
=====  ==============================================================================================================

Example:
    >>> apply({"model": {"size": "tiny"}, "token_budget": 10}, "small")["model"]
    {'size': 'small'}
    >>> apply({"token_budget": 10}, "tiny")
    {'token_budget': 10}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.config import merge_trees

__all__ = ["PRESETS", "Preset", "apply", "default_preset"]


@dataclass(frozen=True)
class Preset:
    """A named override of a run's cluster settings, and what it is for."""

    name: str
    what: str
    cluster: Mapping[str, Any] = field(default_factory=dict)


# The emulated accelerator's delay is off: real compute at these sizes is slower than it. The eval set is the whole
# held-out split (docs/trainer.md, "Real text").
_TEXT = {"data": {"source": "text", "eval_tokens": 131_072}, "learner": {"step_delay_s": 0.0}}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", "the scenario as written: 0.1M parameters, synthetic Markov data"),
        Preset(
            "small",
            "3.3M parameters on real text, 1.5M tokens",
            {**_TEXT, "model": {"size": "small"}, "token_budget": 1_500_000},
        ),
        Preset(
            "wide",
            "6.6M parameters (53 MB of state with the outer momentum) on real text, 0.5M tokens",
            {**_TEXT, "model": {"size": "wide"}, "token_budget": 500_000},
        ),
    )
}


def default_preset() -> str:
    """``DILOCO_PRESET``, else ``tiny``."""
    return os.environ.get("DILOCO_PRESET") or "tiny"


def apply(cluster: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``cluster`` (a RunConfig tree) with preset ``name``'s settings over it; a name not in :data:`PRESETS` is
    refused with the list."""
    if name not in PRESETS:
        raise ValueError(
            f"unknown preset {name!r}: choose one of {', '.join(PRESETS)} (DILOCO_PRESET or --preset)"
        )
    return merge_trees(dict(cluster), dict(PRESETS[name].cluster))
