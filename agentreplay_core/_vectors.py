"""The embedding vectors of embedding steps: what goes to pgvector besides the exact output.

An embedding step's vectors are stored exactly, as the codec stores any list of
`FLOAT_VECTOR_MIN` or more floats: a `floats` tag holding base64 of the little-endian float64
bytes (docs/canonical-json.md). `embedding_output` builds that tree directly for the usual
shapes, a vector or a list of vectors, with a few C-level passes per vector instead of the
codec's general walk; the result is the same tree `encode` makes. Recordings whose vectors
are plain JSON numbers (short vectors, older runs) decode to the same lists.
"""

from __future__ import annotations

import binascii
import functools
import struct
from typing import Any

from agentreplay_core._codec import TAG, Json, decode, encode
from agentreplay_core._codec_encode import FLOAT_VECTOR_MIN
from agentreplay_core._model import Step

__all__ = ["embedding_output", "embedding_vectors", "step_vectors"]


def _is_vector(v: Any) -> bool:
    """A non-empty list or tuple of floats (float subclasses included)."""
    if not isinstance(v, (list, tuple)) or not v:
        return False
    # exact floats, the usual case, in one C-level pass; subclasses (numpy's float64) too
    return list(map(type, v)).count(float) == len(v) or all(isinstance(x, float) for x in v)


def embedding_vectors(output: Any) -> list[list[float]]:
    """The embedding vectors in an embedding step's output: one vector or a list of them."""
    if isinstance(output, (list, tuple)) and output:
        if isinstance(output[0], float):
            return [list(output)] if _is_vector(output) else []
        if all(map(_is_vector, output)):
            return [list(v) for v in output]
    return []


def step_vectors(step: Step) -> list[list[float]]:
    """The vectors a stored embedding step holds (none for other steps, failed ones, or an
    output that cannot be rebuilt here, which held no searchable vector either). Reads both
    stored forms: packed `floats` tags and plain JSON numbers."""
    if step.kind != "embedding" or step.is_error:
        return []
    try:
        return embedding_vectors(decode(step.output, restore_objects=False))
    except Exception:
        return []


@functools.lru_cache(maxsize=64)
def _f64le(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}d")


def _packed(v: list[Any]) -> Json | None:
    """`v` as the codec's `floats` tag, or None when the codec would store it otherwise (too
    short, or not all exactly `float`)."""
    n = len(v)
    if n < FLOAT_VECTOR_MIN or list(map(type, v)).count(float) != n:
        return None
    raw = _f64le(n).pack(*v)
    return {TAG: "floats", "f64le": binascii.b2a_base64(raw, newline=False).decode("ascii")}


def embedding_output(output: Any) -> tuple[Json, list[list[float]]] | None:
    """An embedding step's output as stored and the vectors it holds, or None when `output`
    holds no vectors (then it is encoded like any other value).

    The vectors are copies, so that a caller changing its lists later cannot change what the
    writer thread stores.
    """
    if type(output) is list and output:
        if type(output[0]) is float:
            stored = _packed(output)
            if stored is not None:
                return stored, [list(output)]
        elif type(output[0]) is list:
            tags = [_packed(v) if type(v) is list else None for v in output]
            if None not in tags:
                return tags, [list(v) for v in output]
    vectors = embedding_vectors(output)
    if not vectors:
        return None
    return encode(output, path="output"), vectors
