"""LangGraph's `interrupt()` inside a tool: a pause, recorded and replayed as one.

A tool that asks a person (`interrupt({"question": ...})`) raises `GraphInterrupt`: LangGraph
stops the graph there, shows the interrupt to the program (`result["__interrupt__"]`), and,
resumed with `Command(resume=answer)`, runs the tool again, where `interrupt` returns the
answer. The recording has the paused call as an error step and the resumed call as the tool's
result. The exception's args are `Interrupt` objects, which a recorded error does not keep,
so their values are recorded beside it (`interrupts`, with their key order and the
`response_schema` each was asked with), and the replay tool pauses the graph again by calling
`interrupt` with them: the program sees the same pause with the same values.

LangGraph numbers the `interrupt` calls of a task and hands the answers out by that number:
a tool asking its second question gets the first answer back from its first `interrupt` and
pauses at the second; a node that calls a tool which asked a question and then asks its own
gets the tool's answer first. A served call never runs the tool's `interrupt` calls, so the
stand-in makes them in its place, as many as the tool made live. The recording counts the
answered ones of a paused call (`interrupts_answered`: the calls the tool made in its task,
noted while it ran); the stand-in takes as many answers, then pauses where the task's answers
end, as LangGraph pauses (not by number: parallel calls of one task number their `interrupt`
calls in whatever order their threads reach them, live and in replay). A call served after
pausing goes through as many as its last pause did, plus that one, which was answered. A
recording without the count (made before it was kept) takes the task's answers left.

The resumed call is served, not run, in replay, so the answer the program resumes with would
reach nothing: the answers a resumed task holds are part of its tool calls' requests
(`resume`), and a replay resumed with another answer diverges there (or, with
`on_divergence="live"`, runs the tool, which reads the new answer).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import threading
import time
import weakref
from collections.abc import Hashable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

from langchain_core.runnables.config import var_child_runnable_config

from agentreplay_core import Player
from agentreplay_core._errors import AgentReplayError
from agentreplay_core._key_order import in_key_order, keep_key_order
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
#: beside `interrupts`: the key order of their values where it is not the sorted one (a UI
#: renders a question's fields in the tool's order), and the `response_schema` each was
#: asked with (langgraph 1.2), with its key order (a form's fields), if any was
INTERRUPTS_ORDER = "interrupts_order"
INTERRUPT_SCHEMAS, INTERRUPT_SCHEMAS_ORDER = "interrupt_schemas", "interrupt_schemas_order"
#: ... and how many `interrupt` calls of the paused call returned an answer before it paused
ANSWERED = "interrupts_answered"
#: LangGraph's keys of a task's scratchpad and namespace in the config
_SCRATCHPAD, _NAMESPACE = "__pregel_scratchpad", "checkpoint_ns"


class UnexpectedAnswer(AgentReplayError):
    """A served tool call paused when recorded, but in replay the task holds an answer for
    every question it asks: the replay was resumed with more answers than the recording."""


def _configurable() -> dict[str, Any] | None:
    config = var_child_runnable_config.get()
    configurable = config.get("configurable") if config else None
    return configurable if isinstance(configurable, dict) else None


def _scratchpad() -> Any:
    configurable = _configurable()
    return configurable.get(_SCRATCHPAD) if configurable is not None else None


class _Tally:
    """The `interrupt` calls a recorded tool call made in its task, and those of the calls
    it runs in (a tool calling a tool: serving the outer one serves both)."""

    __slots__ = ("depth", "made", "outer")

    def __init__(self, outer: _Tally | None) -> None:
        self.made: int = 0
        # (a tally left in its caller's context by a call that ended is harmless: nothing
        # reads it again; the depth bounds the chain a loop of calls would otherwise grow)
        if outer is not None and outer.depth >= 8:
            outer = None
        self.outer: _Tally | None = outer
        self.depth: int = outer.depth + 1 if outer is not None else 0


_tally: ContextVar[_Tally | None] = ContextVar("agentreplay_interrupt_tally", default=None)
_wrapping = threading.Lock()


def _handed(counter: Any) -> int | None:
    """How many numbers LangGraph's interrupt counter (`LazyAtomicCounter`, an
    `itertools.count` made at its first call) handed out, or None if it is laid out
    otherwise."""
    if not hasattr(counter, "_counter"):
        return None
    inner = counter._counter
    if inner is None:
        return 0
    shown = repr(getattr(inner, "__self__", None))  # "count(2)"
    return int(shown[6:-1]) if shown.startswith("count(") and shown[6:-1].isdigit() else None


class _NotingCounter:
    """A task's interrupt counter that also counts the call in the tallies of the recorded
    tool calls running in the calling context (parallel calls of one task, in their own
    contexts, count their own), and how many numbers it handed out (None: unknown)."""

    __slots__ = ("counter", "handed", "lock")

    def __init__(self, counter: Any) -> None:
        self.counter = counter
        self.handed = _handed(counter)
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        number = self.counter()
        if self.handed is not None and type(number) is int:
            with self.lock:
                self.handed = max(self.handed, number + 1)
        tally = _tally.get()
        while tally is not None:
            tally.made += 1
            tally = tally.outer
        return number


def _noting(scratchpad: Any) -> _NotingCounter | None:
    """The noting counter of a task's scratchpad, put in place the first time."""
    try:
        with _wrapping:
            counter = scratchpad.interrupt_counter
            if not isinstance(counter, _NotingCounter):
                # (a frozen dataclass: the counter is replaced in place, for the task's run)
                counter = _NotingCounter(counter)
                object.__setattr__(scratchpad, "interrupt_counter", counter)
            return counter
    except Exception:  # another LangGraph's scratchpad: not counted
        return None


def resume_answers(*, watch: bool = True) -> list[Any] | None:
    """The answers (`Command(resume=...)`) the LangGraph task the current call runs in holds
    for its `interrupt` calls, taken or not yet, or None outside a resumed task. A recorded
    tool call starting (`watch`) has its `interrupt` calls counted from here on."""
    scratchpad = _scratchpad()
    if scratchpad is None:
        return None
    # (a recorded tool call starting, `on_tool_start` runs inline in the context the tool then
    # runs in a copy of; a stand-in's pause waits for its task's answers to be taken)
    if _noting(scratchpad) is not None and watch:
        _tally.set(_Tally(_tally.get()))
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
        pending = list(error.args[0])
        values = [dump(getattr(i, "value", None)) for i in pending]
        record[INTERRUPTS] = values
        keep_key_order(record, INTERRUPTS_ORDER, values)
        schemas = [dump(getattr(i, "response_schema", None)) for i in pending]
        if any(schema is not None for schema in schemas):
            record[INTERRUPT_SCHEMAS] = schemas
            keep_key_order(record, INTERRUPT_SCHEMAS_ORDER, schemas)
        tally = _tally.get()  # (this callback runs in the context the call started in)
        if tally is not None and tally.made > 0:  # the last one raised
            record[ANSWERED] = tally.made - 1
    return record


@dataclass
class _Asked:
    """How a served call last paused: the `interrupt` calls it made (the raising one too)
    and what it asked."""

    count: int
    value: Any
    schema: Any


#: per replay: (task, call) -> how the call last paused
_paused: weakref.WeakKeyDictionary[Player, dict[Hashable, _Asked]] = \
    weakref.WeakKeyDictionary()


def call_key(name: str, tool_call_id: str | None, tool_input: Any) -> Hashable:
    """What tells a tool call from the others of its LangGraph task, across the task's runs
    (the answers the task holds, part of its request, grow from one run to the next)."""
    configurable = _configurable() or {}
    task = (str(configurable.get("thread_id")), str(configurable.get(_NAMESPACE)))
    if tool_call_id is not None:
        return (task, name, tool_call_id)
    try:
        shown = json.dumps(tool_input, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types
        shown = repr(tool_input)
    return (task, name, shown)


def _schema_taken() -> bool:
    from langgraph.types import interrupt
    try:
        return "response_schema" in inspect.signature(interrupt).parameters
    except (TypeError, ValueError):
        return False


_TAKES_SCHEMA: bool | None = None


def _ask(value: Any, schema: Any) -> Any:
    """`interrupt(value)`, with the recorded `response_schema` (a JSON schema: LangGraph shows
    it and validates nothing) where this LangGraph takes one."""
    global _TAKES_SCHEMA
    from langgraph.types import interrupt
    if schema is None:
        return interrupt(value)
    if _TAKES_SCHEMA is None:
        _TAKES_SCHEMA = _schema_taken()
    return interrupt(value, response_schema=schema) if _TAKES_SCHEMA else interrupt(value)


def _answers_left() -> int | None:
    """How many `interrupt` calls of the current task can still return an answer, at most."""
    scratchpad = _scratchpad()
    try:
        return len(scratchpad.resume) + 1 if scratchpad is not None else None
    except Exception:
        return None


def _pause_here(value: Any, schema: Any) -> None:
    """Pause the task as `interrupt` pauses it where its answers end (the interrupt's id
    numbered by the answers the task holds, as LangGraph numbers it), without taking a place
    among the task's `interrupt` calls: a parallel call of the task may not have taken its
    answers yet."""
    config = var_child_runnable_config.get()
    configurable = _configurable()
    scratchpad: Any = configurable.get(_SCRATCHPAD) if configurable is not None else None
    try:
        answers = scratchpad.resume
        unanswered = dataclasses.replace(scratchpad, interrupt_counter=lambda: len(answers),
                                         get_null_resume=lambda consume=False: None)
    except Exception:  # another LangGraph's scratchpad: its own `interrupt` call
        unanswered = None
    if unanswered is None or config is None or configurable is None:
        _ask(value, schema)
        return
    token = var_child_runnable_config.set(
        {**config, "configurable": {**configurable, _SCRATCHPAD: unanswered}})
    try:
        _ask(value, schema)
    finally:
        var_child_runnable_config.reset(token)


#: how long a served pause waits for the parallel calls of its task to take their answers
_WAIT_FOR_ANSWERS = 2.0
#: waited on, never set: a pause between looks that `time.sleep` (recorded and replayed as
#: entropy) is not
_NEVER = threading.Event()


def _answers_taken(scratchpad: Any) -> bool:
    """Whether the `interrupt` calls of the task took all of its answers (as they had when
    the call paused live: a pause is an `interrupt` call finding none left), or whether
    that cannot be told."""
    counter = getattr(scratchpad, "interrupt_counter", None)
    handed = counter.handed if isinstance(counter, _NotingCounter) else None
    if handed is None:
        return True
    try:
        return bool(handed >= len(scratchpad.resume)
                    and scratchpad.get_null_resume(False) is None)
    except Exception:
        return True


def _through_answers(replayed: BaseException, player: Player, call: Hashable
                     ) -> _Asked | None:
    """For the replay of a recorded pause: the `interrupt` calls the tool made before it
    paused, made again (the answered ones), and the pause to raise once the task's parallel
    calls took their answers; None for any other error. A recording without their count
    pauses here."""
    record = recorded_error(replayed)
    values = record.get(INTERRUPTS) if isinstance(record, dict) else None
    if not isinstance(values, list) or not values:
        return None
    assert record is not None
    # (one pause per call: the first raises, as it did)
    value = in_key_order([revive(v) for v in values], record.get(INTERRUPTS_ORDER))[0]
    schemas = record.get(INTERRUPT_SCHEMAS)
    schema = None
    if isinstance(schemas, list) and schemas:
        schema = in_key_order([revive(s) for s in schemas],
                              record.get(INTERRUPT_SCHEMAS_ORDER))[0]
    asked = _Asked(0, value, schema)
    left = _answers_left()
    if left is None:  # not in a LangGraph task: `interrupt` says so
        _ask(value, schema)
        _unexpected(asked)
    _paused.setdefault(player, {})[call] = asked
    answered = record.get(ANSWERED)
    if type(answered) is int and answered >= 0:
        for _ in range(answered):  # (one finding no answer pauses, as it would have live)
            asked.count += 1
            _ask(value, schema)
        return asked
    # A recording without the count: the tool went through the answers it was given before
    # it paused, the pause being the first `interrupt` call finding none.
    for _ in range(left + 1):
        asked.count += 1
        _ask(value, schema)
    _unexpected(asked)


def _unexpected(asked: _Asked) -> NoReturn:
    raise UnexpectedAnswer(
        f"the tool call paused here when recorded (interrupt {asked.value!r}), but in replay "
        f"its LangGraph task held an answer for each of its {asked.count} interrupt() calls: "
        "the replay was resumed with answers the recording did not have")


def _pause(asked: _Asked) -> NoReturn:
    asked.count += 1
    _pause_here(asked.value, asked.schema)
    _unexpected(asked)


def pause_again(replayed: BaseException, player: Player, call: Hashable) -> None:
    """Raise the recorded pause the way the tool did (`interrupt` with the recorded values),
    if `replayed` is the replay of one; return otherwise."""
    asked = _through_answers(replayed, player, call)
    if asked is None:
        return
    scratchpad = _scratchpad()
    deadline = time.monotonic() + _WAIT_FOR_ANSWERS
    while not _answers_taken(scratchpad) and time.monotonic() < deadline:
        _NEVER.wait(0.002)
    _pause(asked)


async def apause_again(replayed: BaseException, player: Player, call: Hashable) -> None:
    """`pause_again` in a coroutine: the parallel calls it waits for run in its loop."""
    asked = _through_answers(replayed, player, call)
    if asked is None:
        return
    scratchpad = _scratchpad()
    deadline = time.monotonic() + _WAIT_FOR_ANSWERS
    while not _answers_taken(scratchpad) and time.monotonic() < deadline:
        await asyncio.sleep(0.002)
    _pause(asked)


def answer_again(player: Player, call: Hashable) -> None:
    """For a served call that returned: the `interrupt` calls the tool made live, answered,
    made again so that later ones in its task get the answers meant for them (a call that
    paused before went through them all: those of its last pause and that pause's own)."""
    asked = _paused.get(player, {}).get(call)
    if asked is None:
        return
    for _ in range(asked.count):
        _ask(asked.value, asked.schema)
