"""Adding a fault kind at run time (a plugin, a test): its three pieces go into their three tables together.

A kind is its record (:data:`faults.kinds.KINDS`), its injector
(:data:`faults.injectors.INJECTORS`, whose ``Params`` is the scenario entry's
parameters) and its deterministic effect (:data:`chaos.sim.effects.EFFECTS`).
Everything else reads those tables when it runs, so once registered a kind is
in scenario files, plans, deterministic mode, generated schedules (when it is
local) and the timeline, like a built-in one. A built-in kind is the same three
entries written into the tables' source; docs/scenarios-and-checks.md ("Adding
a fault kind") works through one.

Example:
    >>> from faults.kinds import FaultKind
    >>> from faults.process import Pause
    >>> with fault_kind(FaultKind("pause", "process", removes_learner=True), Pause, EFFECTS["pause"]):
    ...     pass
    Traceback (most recent call last):
    ...
    ValueError: fault kind 'pause' is already registered; pick another name
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from chaos.scenario import entry_classes
from chaos.sim.effects import EFFECTS, Effect
from faults.injectors import INJECTORS
from faults.kinds import KINDS, FaultKind
from faults.params import FaultParams

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_ADDED: set[str] = set()  # the kinds registered here, the only ones that may be unregistered


def _tables() -> tuple[dict[str, FaultKind], dict[str, type], dict[str, Effect]]:
    # The tables are plain dicts that their readers see as read-only Mappings; this module is their one writer.
    return cast(dict, KINDS), cast(dict, INJECTORS), cast(dict, EFFECTS)


def _refusal(kind: Any, injector: Any, effect: Any) -> str | None:
    """Why these three pieces do not make a kind, or None when they do."""
    if not isinstance(kind, FaultKind):
        return f"a fault kind is a faults.kinds.FaultKind record, got {kind!r}"
    name = kind.name
    if not _NAME.match(name):
        return f"fault kind {name!r}: a name is lower-case letters, digits and '_' (a scenario file's `fault:`)"
    if name in KINDS:
        return f"fault kind {name!r} is already registered; pick another name"
    if not isinstance(injector, type):
        return (
            f"fault kind {name!r} needs its injector, a class built as cls(fault_id, targets, **params) "
            f"(faults.injectors), got {injector!r}"
        )
    if getattr(injector, "kind", None) != name:
        return f"fault kind {name!r}: its injector {injector.__name__} must say kind = {name!r}"
    params = getattr(injector, "Params", FaultParams)
    if not (isinstance(params, type) and issubclass(params, FaultParams)):
        return f"fault kind {name!r}: {injector.__name__}.Params must subclass faults.params.FaultParams"
    if not isinstance(effect, Effect):
        return (
            f"fault kind {name!r} needs its deterministic effect, a chaos.sim.effects.Effect "
            f"(what it does to a simulated learner, and syncer), got {effect!r}"
        )
    if effect.syncer is not None and not kind.on_syncer:
        return f"fault kind {name!r}: its effect acts on the syncer but the kind may not target it (on_syncer)"
    if effect.learner is None and not kind.syncer_only:
        return f"fault kind {name!r}: its effect needs a learner part, or the kind must be syncer_only"
    return None


def register_fault_kind(kind: FaultKind, injector: type, effect: Effect) -> None:
    """Add a kind: its record, its injector and its deterministic effect, all three or none (ValueError)."""
    why = _refusal(kind, injector, effect)
    if why:
        raise ValueError(why)
    kinds, injectors, effects = _tables()
    kinds[kind.name], injectors[kind.name], effects[kind.name] = kind, injector, effect
    _ADDED.add(kind.name)
    try:
        entry_classes()  # the scenario entry is built now, so a bad Params is refused here, not in a scenario
    except Exception:
        unregister_fault_kind(kind.name)
        raise


def unregister_fault_kind(name: str) -> None:
    """Remove a kind added by :func:`register_fault_kind` (one no longer there is not an error)."""
    if name in KINDS and name not in _ADDED:
        raise ValueError(
            f"fault kind {name!r} is built in (faults.kinds.KINDS); only kinds added with "
            "register_fault_kind can be unregistered"
        )
    _ADDED.discard(name)
    for table in _tables():
        table.pop(name, None)


@contextmanager
def fault_kind(kind: FaultKind, injector: type, effect: Effect) -> Iterator[None]:
    """A kind registered for the ``with`` block only (tests: the tables are as before afterwards)."""
    register_fault_kind(kind, injector, effect)
    try:
        yield
    finally:
        unregister_fault_kind(kind.name)
