"""LangGraph's `interrupt()` inside a tool: a pause, recorded and replayed as one.

A tool that asks a person (`interrupt({"question": ...})`) raises `GraphInterrupt`: LangGraph
stops the graph there, shows the interrupt to the program (`result["__interrupt__"]`), and,
resumed with `Command(resume=answer)`, runs the tool again, where `interrupt` returns the
answer. The recording has the paused call as an error step and the resumed call as the tool's
result. The exception's args are `Interrupt` objects, which a recorded error does not keep,
so their values are recorded beside it (`interrupts`), and the replay tool pauses the graph
again by calling `interrupt` with them: the program sees the same pause with the same values.

The resumed call is served, not run, in replay, so the answer the program resumes with would
reach nothing: the answers a resumed task holds are part of its tool calls' requests
(`resume`), and a replay resumed with another answer diverges there (or, with
`on_divergence="live"`, runs the tool, which reads the new answer).
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

from agentreplay_core._recorded_errors import error_to_record, recorded_error
from agentreplay_langchain._convert import dump, revive


def _interrupt_type() -> type[BaseException] | None:
    try:
        from langgraph.errors import GraphInterrupt
    except ImportError:  # LangChain without LangGraph: no tool can interrupt
        return None
    return GraphInterrupt


_GRAPH_INTERRUPT = _interrupt_type()

INTERRUPTS = "interrupts"
#: LangGraph's key of a task's scratchpad in the config (`CONFIG_KEY_SCRATCHPAD`)
_SCRATCHPAD = "__pregel_scratchpad"


def resume_answers() -> list[Any] | None:
    """The answers (`Command(resume=...)`) the LangGraph task the current call runs in holds
    for its `interrupt` calls, taken or not yet, or None outside a resumed task."""
    config = var_child_runnable_config.get()
    configurable = config.get("configurable") if config else None
    scratchpad = configurable.get(_SCRATCHPAD) if isinstance(configurable, dict) else None
    if scratchpad is None:
        return None
    try:
        answers = list(scratchpad.resume)
        if not answers:  # an answer given without an interrupt id waits until one takes it
            waiting = scratchpad.get_null_resume(False)
            answers = [waiting] if waiting is not None else []
    except Exception:  # another LangGraph's scratchpad: nothing to compare
        return None
    return [dump(answer) for answer in answers] or None


def tool_error_record(error: BaseException) -> dict[str, Any]:
    """A tool's exception as recorded, with the values of the interrupts it carries."""
    record = error_to_record(error)
    if _GRAPH_INTERRUPT is not None and isinstance(error, _GRAPH_INTERRUPT) and error.args:
        record[INTERRUPTS] = [dump(getattr(i, "value", None)) for i in error.args[0]]
    return record


def pause_again(replayed: BaseException) -> None:
    """Raise the recorded pause the way the tool did (`interrupt` with the recorded values),
    if `replayed` is the replay of one; return otherwise."""
    record = recorded_error(replayed)
    values = record.get(INTERRUPTS) if isinstance(record, dict) else None
    if not isinstance(values, list) or not values:
        return
    from langgraph.types import interrupt

    for value in values:  # the first raises, as it did (one pause per call)
        interrupt(revive(value))
