"""A fault kind's scenario parameters, declared by its injector: ``Params``, a class attribute of each injector.

A scenario's fault entry is the common timing (:mod:`chaos.scenario`: id, targets, at, duration ...) plus the
injector's ``Params``: its fields are the injector's constructor keywords with their defaults and validation,
and their ``examples`` are the values generated schedules draw (:mod:`chaos.strategies`). So a kind's
parameters have one home, beside the code that uses them.

Example:
    >>> class Params(FaultParams):
    ...     rate_kbps: int = Field(ge=1, examples=[50, 1000])
    ...     direction: Direction = "both"
    >>> Params.example(lambda options: options[-1])
    {'rate_kbps': 1000}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Direction = Literal["both", "to_syncer", "from_syncer"]

__all__ = ["Direction", "FaultParams", "Field", "model_validator"]  # what an injector module needs to declare them


class FaultParams(BaseModel):
    """The parameters of a kind that takes none; a kind with some subclasses it and declares them as fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no NaN or infinite numbers

    @classmethod
    def example(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """Parameter values for a generated schedule: ``pick`` chooses one of each field's ``examples`` (fields
        without examples keep their default). A kind whose values depend on each other overrides this."""
        return {name: pick(f.examples) for name, f in cls.model_fields.items() if f.examples}
