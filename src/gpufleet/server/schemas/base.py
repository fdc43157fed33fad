"""What the bodies share: request strictness, records mapped by field name, error answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

Name = Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """Worker bodies: agents of other versions may send fields we do not know."""

    model_config = ConfigDict(extra="ignore")


class _Over:
    """A record's attributes with a few laid over them, for `from_attributes`."""

    __slots__ = ("_more", "_record")

    def __init__(self, record: object, more: Mapping[str, object]) -> None:
        self._record = record
        self._more = more

    def __getattr__(self, name: str) -> object:
        if name in self._more:
            return self._more[name]
        return getattr(self._record, name)


class Record(BaseModel):
    """A response body read off a domain record: each field is the attribute of its name."""

    model_config = ConfigDict(from_attributes=True)

    @classmethod
    def of(cls, record: Any) -> Self:
        return cls.model_validate(record)

    @classmethod
    def over(cls, record: object, **more: object) -> Self:
        """Read `record`, with `more` for the fields it lacks or that say it differently."""
        return cls.model_validate(_Over(record, more))


class ErrorOut(BaseModel):
    detail: str  # what happened and what to do next


class ValidationErrorOut(ErrorOut):
    errors: list[dict[str, Any]] = Field(default_factory=list)  # field by field, when known


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "The body could not be read as JSON"},
    401: {"model": ErrorOut, "description": "No valid credentials"},
    403: {"model": ErrorOut, "description": "The credentials lack the permission"},
    404: {"model": ErrorOut, "description": "No such worker, job, config or key"},
    409: {"model": ErrorOut, "description": "The current state forbids this"},
    413: {"model": ErrorOut, "description": "The body is over 4 MiB"},
    422: {"model": ValidationErrorOut, "description": "The input says something impossible"},
    429: {"model": ErrorOut, "description": "Too many failed authentications"},
}


SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "JSON, or with follow / on the stream endpoints Server-Sent Events",
        "content": {"text/event-stream": {"schema": {"type": "object"}}},
    }
}


class Ok(BaseModel):
    ok: bool = True
