"""Differences between the langchain-core lines we support (0.3.x and 1.x), in one place."""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

from langchain_core.language_models import chat_models
from langchain_core.load import load
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool
from packaging.specifiers import SpecifierSet
from packaging.version import Version

#: the langchain-core versions this adapter supports (a PEP 440 specifier); the `langchain`
#: extra says the same, and tests/test_supported_versions.py keeps the two equal
SUPPORTED_LANGCHAIN_CORE = ">=0.3.81,!=1.0.*,!=1.1.*,!=1.2.0,!=1.2.1,!=1.2.2,!=1.2.3,!=1.2.4,<2"

LANGCHAIN_CORE_VERSION = version("langchain-core")
LANGCHAIN_CORE_MAJOR = Version(LANGCHAIN_CORE_VERSION).major
if not SpecifierSet(SUPPORTED_LANGCHAIN_CORE).contains(LANGCHAIN_CORE_VERSION, prereleases=True):
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


def make_loader(allowed: Sequence[type[Any]]) -> Callable[[Any], Any]:
    """A `load` for the given allow-list whose allow-list is computed once.

    `load()` builds a `Reviver` (and with it the allowed class paths) on every call, which costs
    more than the rest of a replayed step. Where this version has the pieces `load` itself
    uses, one `Reviver` is kept and the same walk is done here (escaped user dicts, depth
    limit); anywhere else, plain `load` with the same arguments.
    """
    kwargs = load_kwargs(allowed)
    plain = getattr(load, "__wrapped__", load)  # skips only the per-call "beta" warning
    try:
        from langchain_core.load._validation import _is_escaped_dict, _unescape_value

        load_module = importlib.import_module("langchain_core.load.load")

        reviver = load_module.Reviver(allowed_objects=list(allowed), **{
            k: v for k, v in kwargs.items() if k != "allowed_objects"})
        max_depth = int(getattr(load_module, "_MAX_DEPTH", 200))
    except Exception:
        return lambda obj: plain(obj, **kwargs)

    def walk(obj: Any, depth: int = 0) -> Any:
        if depth > max_depth:
            raise ValueError(f"Cannot load object nested more than {max_depth} levels deep.")
        if isinstance(obj, dict):
            if _is_escaped_dict(obj):
                return _unescape_value(obj)
            return reviver({k: walk(v, depth + 1) for k, v in obj.items()})
        if isinstance(obj, list):
            return [walk(item, depth + 1) for item in obj]
        return obj
    return walk


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


def keep_signatures(*functions: Callable[..., Any]) -> None:
    """Store each function's signature as its `__signature__`. LangChain asks for the signature
    of a model's `_generate` (and a tool's `_run`) on every call, to see whether it takes
    `run_manager`; `inspect.signature` then starts from the stored one instead of building it
    from the code again, which is most of its cost (~20 us a call)."""
    for function in functions:
        setattr(function, "__signature__", inspect.signature(function))  # noqa: B010
