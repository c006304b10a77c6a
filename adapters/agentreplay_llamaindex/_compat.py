"""Differences between llama-index-core lines, detected by feature, in one place."""

from __future__ import annotations

import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

#: the llama-index-core lines this adapter supports (the `llamaindex` extra says the same)
SUPPORTED_VERSIONS = ">=0.12.0,<0.15"
_warned = False


def is_supported(text: str) -> bool:
    """Whether a llama-index-core version string lies in `SUPPORTED_VERSIONS`."""
    try:
        return SpecifierSet(SUPPORTED_VERSIONS).contains(Version(text), prereleases=True)
    except InvalidVersion:
        return False


def warn_if_unsupported() -> None:
    """Warn once when the installed llama-index-core is outside the tested lines."""
    global _warned
    installed = installed_version()
    if _warned or installed == "unknown" or is_supported(installed):
        return
    _warned = True
    warnings.warn(
        f"agentreplay_llamaindex is tested with llama-index-core{SUPPORTED_VERSIONS}, but "
        f"{installed} is installed: recording or replay may miss calls; check the run with "
        "`agentreplay show` before trusting it", RuntimeWarning, stacklevel=3)


def installed_version() -> str:
    try:
        return version("llama-index-core")
    except PackageNotFoundError:  # pragma: no cover - an unusual install (vendored source)
        return "unknown"


def _workflow_context_type() -> type | None:
    # The workflow Context moved into the separate `workflows` package during 0.12; agents
    # pass it to tools that ask for it, and it is run state, not a tool argument.
    for module, name in (("workflows", "Context"), ("llama_index.core.workflow", "Context")):
        try:
            imported = __import__(module, fromlist=[name])
        except ImportError:
            continue
        found = getattr(imported, name, None)
        if isinstance(found, type):
            return found
    return None


_CONTEXT_TYPE = _workflow_context_type()


def _suspension_type() -> type | None:
    # llama-index-workflows 2.9 suspends a step that waits for an event (a person's answer to
    # a tool's question) by raising this, and runs the step again once the event arrives:
    # the tool is called twice, and the first call ends in no result of its own
    try:
        from workflows.runtime.types.results import WaitingForEvent
    except ImportError:
        return None
    return WaitingForEvent if isinstance(WaitingForEvent, type) else None


_SUSPENSION_TYPE = _suspension_type()


def is_workflow_suspension(err: BaseException | None) -> bool:
    """Whether `err` is the workflow pausing a step to wait for an event, not a failure."""
    return _SUSPENSION_TYPE is not None and isinstance(err, _SUSPENSION_TYPE)


def is_workflow_context(value: Any) -> bool:
    return _CONTEXT_TYPE is not None and isinstance(value, _CONTEXT_TYPE)


_WRAPPER_CLASSES: dict[type, bool] = {}


def is_wrapper_llm(instance: Any) -> bool:
    """An LLM that only wraps another LLM and calls it (`llm.as_structured_llm(Model)`)."""
    cls = type(instance)
    wrapper = _WRAPPER_CLASSES.get(cls)
    if wrapper is None:  # once per class: this runs for every LLM call recorded
        from llama_index.core.llms.structured_llm import StructuredLLM

        wrapper = _WRAPPER_CLASSES[cls] = issubclass(cls, StructuredLLM)
    if not wrapper:
        return False
    from llama_index.core.llms.llm import LLM

    return isinstance(instance.llm, LLM)


def active_span_id() -> str | None:
    """The id of the innermost open instrumentation span in this context."""
    from llama_index_instrumentation.span import active_span_id as current

    found = current.get()
    return found if isinstance(found, str) else None
