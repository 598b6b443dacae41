"""What the run's typed records share: a name for free-form JSON, and two bases.

``Record`` writes NaN and the infinities as JSON's constants, as ``json.dumps`` does (a final eval loss of NaN
stays NaN in report.json instead of turning into null). ``SparseRecord`` is for a record that several producers
fill differently (a real run's teardown has exit codes, a simulated one says it was simulated): it writes the
fields its producer gave and no others, so each producer's JSON keeps its own keys.

Example:
    >>> class Left(SparseRecord):
    ...     proxies: list[str] = []
    ...     simulated: bool = False
    >>> Left(simulated=True).model_dump(), Left().model_dump()
    ({'simulated': True}, {})
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

# A JSON object whose keys its producer chooses (a check's evidence, a fault's own settings): typed as far as it is.
JsonObject = dict[str, object]


class Record(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")

    def to_json(self) -> str:
        """The record as a JSON file's text, as ``json.dumps(..., indent=2)`` writes it (NaN stays NaN)."""
        return json.dumps(self.model_dump(mode="json"), indent=2)

    def write(self, path: Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """The record a JSON file holds; a ValidationError names each field that is missing or wrong."""
        return cls.model_validate(json.loads(Path(path).read_text()))  # json.loads: NaN as written


class SparseRecord(Record):
    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> JsonObject:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}
