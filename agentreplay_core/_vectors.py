"""The embedding vectors of embedding steps: what goes to pgvector besides the exact output."""

from __future__ import annotations

from typing import Any

from agentreplay_core._codec import Json, decode, encode
from agentreplay_core._model import Step


def embedding_vectors(output: Any) -> list[list[float]]:
    """The embedding vectors in an embedding step's output: one vector or a list of them."""
    if isinstance(output, (list, tuple)) and output:
        if all(isinstance(x, float) for x in output):
            return [list(output)]
        if all(isinstance(v, (list, tuple)) and v and all(isinstance(x, float) for x in v)
               for v in output):
            return [list(v) for v in output]
    return []


def step_vectors(step: Step) -> list[list[float]]:
    """The vectors a stored embedding step holds (none for other steps, failed ones, or an
    output that cannot be rebuilt here, which held no searchable vector either)."""
    if step.kind != "embedding" or step.is_error:
        return []
    try:
        return embedding_vectors(decode(step.output, restore_objects=False))
    except Exception:
        return []


def embedding_output(output: Any) -> tuple[Json, list[list[float]]] | None:
    """An embedding step's output as stored and the vectors it holds, or None when `output`
    holds no vectors (then it is encoded like any other value)."""
    vectors = embedding_vectors(output)
    if not vectors:
        return None
    return encode(output, path="output"), vectors
