"""Pure functions that make replay divergences readable (DESIGN section 5).

When a replayed call matches no recorded step, the player builds a `ReplayDivergence` from:

- `structural_diff(recorded_request, actual_request)`: the differences, as `DiffEntry` items;
- `render_diff(entries)`: those differences as text (the ``diff`` of the error);
- `classify(kind, entries)`: ``prompt_changed``, ``params_changed`` or ``tool_args_changed``;
- `nearest_candidates(actual, kind, name, recorded)`: the recorded steps it may have meant.

Example:
    >>> entries = structural_diff(
    ...     {"messages": [{"role": "user", "content": "Weather in Paris?"}], "model": "m"},
    ...     {"messages": [{"role": "user", "content": "Weather in Lyon?"}], "model": "m"},
    ... )
    >>> print(render_diff(entries))
    ~ messages[0].content: 'Weather in Paris?' -> 'Weather in Lyon?'
    >>> classify("llm", entries)
    'prompt_changed'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from agentreplay_core._diff_candidates import Candidate, nearest_candidates
from agentreplay_core._diff_render import render_diff
from agentreplay_core._diff_structure import DiffEntry, DiffList, DiffOp, structural_diff
from agentreplay_core._diff_values import ROOT, similarity, summarize

__all__ = [
    "PROMPT_KEYS",
    "TOOL_PARAM_KEYS",
    "Candidate",
    "DiffEntry",
    "DiffList",
    "DiffOp",
    "classify",
    "nearest_candidates",
    "render_diff",
    "similarity",
    "structural_diff",
    "summarize",
]

# Top-level keys of an llm (or decision) request that hold the prompt; every other key is a
# parameter. A decision model (a classifier) reads its state and questions as a model reads
# its prompt.
PROMPT_KEYS = frozenset(
    {"messages", "prompt", "prompts", "input", "inputs", "text", "query", "query_str",
     "system", "instructions", "contents", "state", "questions"}
)  # fmt: skip
# Top-level keys of a tool, retriever or embedding request that are settings, not input.
TOOL_PARAM_KEYS = frozenset(
    {"model", "model_name", "k", "top_k", "similarity_top_k", "search_type", "search_kwargs",
     "dimensions", "encoding_format", "config", "metadata", "tags"}
)  # fmt: skip
_LLM_KINDS = frozenset({"llm", "decision"})
# Mirrors agentreplay_core._model.ENTROPY_KINDS; their requests are all parameters.
_ENTROPY_KINDS = frozenset({"time", "random", "uuid", "sleep"})
_KEY = re.compile(r"[^.\[]+")


def classify(kind: str, entries: Iterable[DiffEntry]) -> str:
    """Name what kind of change made a request miss its recorded step.

    - ``llm``, ``decision``: ``prompt_changed`` when any difference is under a prompt key
      (`PROMPT_KEYS`, e.g. ``messages``, ``prompt`` or a classifier's ``state``) or the
      request is not a dict at all, else ``params_changed`` (model name, temperature, tools,
      stop, ...).
    - ``time``, ``random``, ``uuid``, ``sleep``: ``params_changed``.
    - ``tool``, ``retriever``, ``embedding`` and any other kind: ``params_changed`` when every
      difference is under a settings key (`TOOL_PARAM_KEYS`, e.g. ``k`` or ``model``), else
      ``tool_args_changed``.

    An empty diff classifies as what the kind's requests are made of (``params_changed`` for
    llm and entropy kinds, ``tool_args_changed`` otherwise).

    ``unexpected_call``, ``missing_call`` and ``order_changed`` are never returned: they
    follow from which recorded steps remain to be consumed, which only the player knows.
    """
    keys = [_top_key(entry.path) for entry in entries]
    if kind in _LLM_KINDS:
        prompt = any(key is None or key in PROMPT_KEYS for key in keys)
        return "prompt_changed" if prompt else "params_changed"
    if kind in _ENTROPY_KINDS:
        return "params_changed"
    if keys and all(key is not None and key in TOOL_PARAM_KEYS for key in keys):
        return "params_changed"
    return "tool_args_changed"


def _top_key(path: str) -> str | None:
    """The top-level dict key a diff path starts with, or None for the root or a list index."""
    if path.startswith(ROOT):
        rest = path[len(ROOT) :]
        if rest.startswith('["'):
            key, _ = json.JSONDecoder().raw_decode(rest, 1)
            return key if isinstance(key, str) else None
        return None
    match = _KEY.match(path)
    return match.group() if match else None
