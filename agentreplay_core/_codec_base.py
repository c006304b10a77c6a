"""Shared pieces of the codec: the tag key, nesting limit and the path-collecting failure."""

from __future__ import annotations

import re
from typing import Any, TypeAlias

from agentreplay_core._errors import SerializationError

#: JSON-native tree (dict with str keys, list, str, int, float, bool, None) as made by `encode`.
#: Kept as `Any`: a recursive union would force a cast at every use in consuming code.
Json: TypeAlias = Any

#: Reserved key of a tagged object; its value names the tag.
TAG = "__ar__"

#: Deepest container level `encode` produces for a value's own dicts and lists. Tagged leaves
#: add at most two more levels, keeping every encoded tree within orjson's limit of 254.
MAX_NESTING = 252

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def type_name(value: object) -> str:
    """`module.Qualname` of a value's type (just the name for builtins)."""
    cls = type(value)
    module = getattr(cls, "__module__", None)
    if module in (None, "builtins"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def short_repr(value: object, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters; never raises."""
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not hide the real error
        text = f"<{type_name(value)} (repr failed: {type(exc).__name__})>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def key_segment(key: object) -> str:
    """Path segment of a dict entry: `.name` for identifier-like keys, `["other key"]` else."""
    if isinstance(key, str):
        if _IDENTIFIER.match(key):
            return f".{key}"
        escaped = key.replace("\\", "\\\\").replace('"', '\\"')
        return f'["{escaped}"]'
    return f"[{short_repr(key, 40)}]"


class CodecFailure(Exception):
    """Internal: raised inside the walk; each container adds its segment while unwinding.

    Collecting the path on the way out keeps the successful walk free of path bookkeeping.
    """

    def __init__(self, message: str, type_name: str | None = None, *, too_deep: bool = False,
                 recorded_at: str | None = None):
        super().__init__(message)
        self.message = message
        self.type_name = type_name
        self.too_deep = too_deep
        #: where in the recorded value an unencodable marker's value was: its path when the
        #: marker is the whole decoded tree (`$` would say nothing)
        self.recorded_at = recorded_at
        #: (segment, id of the container holding it), innermost first
        self.trail: list[tuple[str, int]] = []

    def add(self, segment: str, container: object) -> None:
        self.trail.append((segment, id(container)))

    def to_error(self, base: str) -> SerializationError:
        """The public error, with the full path (and a circular reference named as such)."""
        outward = self.trail[::-1]
        if self.too_deep:
            seen: dict[int, str] = {}
            path = base
            for segment, container in outward:
                if container in seen:
                    return SerializationError(
                        f"circular reference: the value at {path} is the same object as its "
                        f"ancestor at {seen[container]}; break the cycle before recording",
                        path=path,
                        type_name=self.type_name,
                    )
                seen[container] = path
                path += segment
        path = base + "".join(segment for segment, _ in outward)
        if not outward and self.recorded_at is not None:
            path = self.recorded_at
        return SerializationError(self.message, path=path, type_name=self.type_name)


def too_deep(value: object) -> CodecFailure:
    return CodecFailure(
        f"value nested more than {MAX_NESTING} levels deep, the most JSON storage allows; "
        "flatten it before recording",
        type_name(value),
        too_deep=True,
    )
