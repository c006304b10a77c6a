"""Differences between the langchain-core lines we support (0.3.x and 1.x), in one place."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from langchain_core.language_models import chat_models
from langchain_core.load import load
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

#: the langchain-core versions this adapter supports; the `langchain` extra says the same
SUPPORTED_LANGCHAIN_CORE = ">=0.3,<2"

LANGCHAIN_CORE_VERSION = version("langchain-core")
LANGCHAIN_CORE_MAJOR = int(LANGCHAIN_CORE_VERSION.split(".")[0])
_MINOR = int(LANGCHAIN_CORE_VERSION.split(".")[1])
if not (0, 3) <= (LANGCHAIN_CORE_MAJOR, _MINOR) < (2, 0):
    warnings.warn(
        f"agentreplay_langchain supports langchain-core {SUPPORTED_LANGCHAIN_CORE}; "
        f"{LANGCHAIN_CORE_VERSION} is installed, so recording or replay may be incomplete",
        RuntimeWarning, stacklevel=2)

_LOAD_PARAMETERS = frozenset(inspect.signature(load).parameters)

#: on_tool_start receives inputs without injected arguments (and the tool_call_id) only on 1.x
TOOL_START_FILTERS_INJECTED = hasattr(BaseTool, "_filter_injected_args")


def load_kwargs(allowed: Sequence[type[Any]]) -> dict[str, Any]:
    """Keyword arguments for `langchain_core.load.load` that this version understands: an
    explicit allow-list of classes and no secrets read from the environment."""
    kwargs: dict[str, Any] = {}
    if "allowed_objects" in _LOAD_PARAMETERS:
        kwargs["allowed_objects"] = list(allowed)
    if "secrets_from_env" in _LOAD_PARAMETERS:
        kwargs["secrets_from_env"] = False
    if "ignore_unserializable_fields" in _LOAD_PARAMETERS:
        # e.g. a parsed pydantic object in additional_kwargs: revive the rest, not fail
        kwargs["ignore_unserializable_fields"] = True
    return kwargs


def format_for_tracing(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The messages as `on_chat_model_start` shows them (1.x rewrites some image blocks)."""
    formatter = getattr(chat_models, "_format_for_tracing", None)
    return list(formatter(messages)) if formatter is not None else list(messages)


def tool_start_inputs(tool: BaseTool, tool_input: str | dict[str, Any]) -> Any:
    """What `on_tool_start` receives as the tool's inputs for this call on this version."""
    if isinstance(tool_input, str):
        return tool_input
    if TOOL_START_FILTERS_INJECTED:
        return tool._filter_injected_args(tool_input)
    return tool_input
