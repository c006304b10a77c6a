"""Runs and steps: the rows of the run log (DESIGN section 2).

`Step.input` and `Step.output` hold the *encoded* form produced by `agentreplay_core.encode`
(plain JSON with tagged objects), which is what is stored and hashed. Decode them with
`agentreplay_core.decode` to get the original Python values back.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator

FORMAT_VERSION = 1

_KIND_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


class StepKind(str, Enum):
    """The step kinds agentreplay knows. Kinds are plain strings and may be extended."""

    LLM = "llm"
    TOOL = "tool"
    RETRIEVER = "retriever"
    EMBEDDING = "embedding"
    TIME = "time"
    RANDOM = "random"
    UUID = "uuid"
    SLEEP = "sleep"

    def __str__(self) -> str:
        return self.value


ENTROPY_KINDS = frozenset({"time", "random", "uuid", "sleep"})


def check_kind(kind: str) -> str:
    """Return `kind` as a plain string, or raise ValueError if it is not a valid kind name."""
    value = kind.value if isinstance(kind, StepKind) else kind
    if not isinstance(value, str) or not _KIND_RE.match(value):
        raise ValueError(
            f"invalid step kind {kind!r}: use lower-case letters, digits, '_', '.', '-' "
            "(e.g. 'llm', 'tool', 'my.kind')"
        )
    return value


class RunStatus(str, Enum):
    RECORDING = "recording"
    COMPLETE = "complete"
    FAILED = "failed"
    INCOMPLETE = "incomplete"

    def __str__(self) -> str:
        return self.value


class Run(BaseModel):
    """One recorded agent run (a row of `runs`)."""

    model_config = ConfigDict(frozen=False, extra="forbid")

    run_id: UUID
    name: str | None = None
    status: RunStatus = RunStatus.RECORDING
    started_at: datetime
    finished_at: datetime | None = None
    parent_run_id: UUID | None = None
    fork_step: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    step_count: int = 0
    head_checksum: str | None = None
    format_version: int = FORMAT_VERSION
    #: "sha256" or "hmac-sha256": how the chain was computed.
    chain: str = "sha256"


class Step(BaseModel):
    """One recorded call (a row of `run_log`)."""

    model_config = ConfigDict(frozen=False, extra="forbid")

    run_id: UUID
    step: int = Field(ge=1)
    kind: str
    name: str
    match_key: str
    path: str = ""
    input: Any = None
    output: Any = None
    is_error: bool = False
    started_at: datetime
    duration_ms: float = 0.0
    checksum: str

    @field_validator("kind")
    @classmethod
    def _valid_kind(cls, value: str) -> str:
        return check_kind(value)


_STEP_FIELDS = tuple(Step.model_fields)


def loaded_step(run_id: UUID, step: int, kind: str, name: str, match_key: str, path: str,
                input: Any, output: Any, is_error: bool, started_at: datetime,
                duration_ms: float, checksum: str) -> Step:
    """A `Step` from stored columns, unvalidated like `Step.model_construct` (a row changed
    behind agentreplay's back must reach verification, not fail the load), without its
    per-field default handling: half the cost, which shows when a run has 100,000 steps.

    Every field is given, so the instance is exactly what `model_construct` builds.
    """
    values = dict(zip(_STEP_FIELDS, (run_id, step, kind, name, match_key, path, input, output,
                                     is_error, started_at, duration_ms, checksum), strict=True))
    return constructed(Step, values, set(_STEP_FIELDS))


Model = TypeVar("Model", bound=BaseModel)


def constructed(cls: type[Model], values: dict[str, Any], fields_set: set[str],
                extra: dict[str, Any] | None = None) -> Model:
    """What pydantic's `model_construct` builds from `values` (every field, in declaration
    order) for a model without private attributes: set directly, for a fraction of its cost.
    `extra` is the extra fields of a model with `extra="allow"` (None for other models)."""
    built = _new(cls)
    _set_dict(built, values)
    _set_fields_set(built, fields_set)
    _set_extra(built, extra)
    _set_private(built, None)
    return built


# BaseModel's own slots, set through their descriptors: a third of `object.__setattr__`'s cost
_new = object.__new__
_set_dict = vars(BaseModel)["__dict__"].__set__
_set_fields_set = vars(BaseModel)["__pydantic_fields_set__"].__set__
_set_extra = vars(BaseModel)["__pydantic_extra__"].__set__
_set_private = vars(BaseModel)["__pydantic_private__"].__set__


class EmbeddingMatch(BaseModel):
    """One result of `store.search_embeddings`."""

    run_id: UUID
    step: int
    position: int
    distance: float
    name: str | None = None
