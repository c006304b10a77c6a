"""Recorded exceptions: what is stored when a recorded call raised, and how replay re-raises it."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import re
import sys
from typing import Any

from agentreplay_core._errors import ReplayedError, ReplayedInterruption

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


#: the interrupts a recorded call may end with besides its `Exception`s (Ctrl-C, `sys.exit()`
#: in a tool): recorded like errors, and raised again as themselves so that the replayed
#: program stops where the live one did rather than in the agent's `except Exception:`
INTERRUPTS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)
#: what a call that records its own outcome catches, records as its error and re-raises
FAILURES: tuple[type[BaseException], ...] = (Exception, *INTERRUPTS)
#: `FAILURES` and a cancellation (a timeout), recorded so that replay stays aligned
FAILURES_AND_CANCELLATION: tuple[type[BaseException], ...] = (*FAILURES,
                                                               asyncio.CancelledError)


def records_as_outcome(exc: BaseException) -> bool:
    """Whether a call that ended in `exc` records it as its error (`Recorder._calling`): any
    exception but a `GeneratorExit`. That one means a coroutine or generator running the call
    was closed (abandoned, or collected while suspended) at a moment that garbage collection
    may choose, perhaps after the run was sealed: not how the call ended, and not something a
    replay could raise at the same point."""
    return not isinstance(exc, GeneratorExit)


def is_cancellation(record: Any) -> bool:
    """Whether a recorded error is a call that was cancelled (a timeout, a cancelled task)."""
    return isinstance(record, dict) and record.get("cancelled") is True


def error_to_record(exc: BaseException) -> dict[str, Any]:
    """The JSON-able description of an exception (type, module, message, plain args).

    Never raises: it runs while the user's exception is on its way to them."""
    try:
        return _described(exc)
    except Exception:  # an exception class of the user's, odd enough to fail all of the above
        cls = type(exc)
        return {"type": cls.__qualname__, "module": cls.__module__, "message": _shown(exc)}


def _shown(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ fails must not replace the user's own
        return f"<{type(exc).__qualname__} with an unprintable message>"


def _attribute(exc: BaseException, name: str) -> Any:
    """`getattr(exc, name, None)`, also for a class whose `__getattr__` raises something
    other than AttributeError (`return self.fields[name]`: a KeyError), which would take the
    place of the user's exception."""
    try:
        return getattr(exc, name, None)
    except Exception:
        return None


def _described(exc: BaseException) -> dict[str, Any]:
    cls = type(exc)
    record: dict[str, Any] = {
        "type": cls.__qualname__,
        "module": cls.__module__,
        "message": _shown(exc),
    }
    if _plain_args(exc.args):
        record["args"] = list(exc.args)
    attributes = _plain_attributes(exc)
    if attributes:
        record["attributes"] = attributes
    if isinstance(exc, asyncio.CancelledError):
        record["cancelled"] = True
    if not isinstance(exc, Exception) and type(exc) not in INTERRUPTS:
        record[BASE_EXCEPTION] = True  # replayed past `except Exception:`, as it went live
    group = _group_record(exc)
    if group is not None:
        record["group"] = group
    extra = kept_beside(exc)
    if isinstance(extra, dict):
        record.update((k, v) for k, v in extra.items() if k not in record)
    return record


#: marks the record of an exception that is not an `Exception` (other than the built-in
#: interrupts): replayed as `ReplayedInterruption` where it is not rebuilt as itself
BASE_EXCEPTION = "base_exception"
#: a recorded exception group (`asyncio.TaskGroup`'s) keeps at most this many exceptions in
#: all, nested at most this deep; a larger one is recorded as other exceptions are
_MAX_GROUP_MEMBERS, _MAX_GROUP_DEPTH = 1_000, 16


def _group_base() -> type[BaseException] | None:
    """`BaseExceptionGroup`: built in from Python 3.11; on 3.10 the `exceptiongroup`
    backport's, if the program imported it (agentreplay does not depend on it)."""
    found = getattr(builtins, "BaseExceptionGroup", None)
    if found is None:
        found = getattr(sys.modules.get("exceptiongroup"), "BaseExceptionGroup", None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _group_record(exc: BaseException) -> dict[str, Any] | None:
    """A group's own message and the records of its exceptions (each as `error_to_record`
    makes it), from which replay makes the group again: `except*` and `except ExceptionGroup`
    then run as they did live."""
    base = _group_base()
    if base is None or not isinstance(exc, base) or not _group_fits(exc, base):
        return None
    message = _attribute(exc, "message")
    if not isinstance(message, str):
        return None
    return {"message": message,
            "exceptions": [error_to_record(member) for member in _attribute(exc, "exceptions")]}


def _group_fits(group: BaseException, base: type[BaseException]) -> bool:
    """Whether `group` (with the groups inside it) is within the recorded limits."""
    budget = _MAX_GROUP_MEMBERS
    pending: list[tuple[BaseException, int]] = [(group, 0)]
    while pending:
        exc, depth = pending.pop()
        members = _attribute(exc, "exceptions")
        if type(members) is not tuple or depth >= _MAX_GROUP_DEPTH:
            return False
        budget -= len(members)
        if budget < 0:
            return False
        pending.extend((member, depth + 1) for member in members if isinstance(member, base))
    return True


#: set on an exception by an adapter (`keep_beside`): what the failed call did before it raised
#: (the events it reported), stored in the exception's record beside the error
BESIDE = "__agentreplay_beside__"


def keep_beside(exc: BaseException, values: dict[str, Any]) -> None:
    """Have `error_to_record(exc)` store `values` beside the error (never its own fields)."""
    # an exception that takes no attributes keeps its error alone
    with contextlib.suppress(Exception):
        setattr(exc, BESIDE, {**(kept_beside(exc) or {}), **values})


def kept_beside(exc: BaseException) -> Any:
    """What `keep_beside` set on `exc`, if anything."""
    return _attribute(exc, BESIDE)


_PLAIN = (str, int, float, bool, type(None))
_MAX_ATTRIBUTES, _MAX_TEXT, _MAX_ARG_VALUES = 32, 2_000, 200
#: what an argument may hold besides `_PLAIN` values, all of which the codec keeps as they
#: are: `KeyError(("user", 42))`, `UnicodeDecodeError("utf-8", b"\xff", ...)`,
#: `CalledProcessError(1, ["git", "push"])`
_ARG_SCALARS = (*_PLAIN, bytes)
_ARG_CONTAINERS = (tuple, list, dict)


def _plain_args(args: tuple[Any, ...]) -> bool:
    """Whether an exception's args can be recorded to rebuild it: plain values, bytes, and
    small tuples, lists and dicts of them (nothing that an encoding could fail on)."""
    budget = _MAX_ARG_VALUES
    pending: list[Any] = list(args)
    while pending:
        value = pending.pop()
        budget -= 1
        if budget < 0:
            return False
        if type(value) in _ARG_CONTAINERS:
            pending.extend(value.items() if type(value) is dict else value)
        elif not isinstance(value, _ARG_SCALARS):
            return False
    return True


def _plain_attributes(exc: BaseException) -> dict[str, Any]:
    """The public attributes of `exc` with plain values (an API error's `status_code`,
    `code`, `type`), which handlers read; objects (an HTTP response) are left out. An
    `OSError`'s file names too, which its message shows but its args do not hold."""
    kept: dict[str, Any] = {}
    if isinstance(exc, OSError):
        for name in ("filename", "filename2"):
            value = _attribute(exc, name)
            if isinstance(value, str) and len(value) <= _MAX_TEXT:
                kept[name] = value
    try:
        found = vars(exc)
    except TypeError:  # slots only
        return kept
    for name, value in found.items():
        if len(kept) == _MAX_ATTRIBUTES:
            break
        if type(name) is str and not name.startswith("_") and _plain_attribute(value):
            kept[name] = value
    return kept


def _plain_attribute(value: Any) -> bool:
    """A value an attribute is kept with: plain, or a small container of plain values (an API
    error's parsed `body`, which a retry handler reads as `e.body["error"]["retry_after"]`)."""
    if isinstance(value, str):
        return len(value) <= _MAX_TEXT
    if isinstance(value, _PLAIN):
        return True
    return type(value) in _ARG_CONTAINERS and _plain_args((value,))


def _lookup(module: str, qualname: str) -> Any:
    # Only a module the program has imported: a run log (an import from elsewhere, a
    # tampered row) never makes a replay import one (which runs its top-level code). Code
    # that catches an error by its class has imported the class's module anyway.
    obj: Any = sys.modules.get(module) if _DOTTED.match(module) else None
    if obj is None or not _DOTTED.match(qualname):
        return None
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj


def _resolve_type(module: str, qualname: str) -> type[BaseException] | None:
    obj = _lookup(module, qualname)
    # Other BaseExceptions are never rebuilt from data: a cancelled call replays through
    # `is_cancellation` (others as `ReplayedInterruption`, which has no behaviour of its own),
    # and a tampered run log must not raise a GeneratorExit or a library's own BaseException
    # past the program's error handling. The built-in interrupts alone
    # (exactly those classes, not subclasses) are: they can only stop the replay, as they
    # stopped the recording.
    if isinstance(obj, type) and (issubclass(obj, Exception) or obj in INTERRUPTS):
        return obj
    return None


def error_from_record(record: Any) -> BaseException:
    """Rebuild a recorded exception: the same type where its module is imported and it can be
    constructed from its recorded args (or made without its constructor, showing the recorded
    message), else `ReplayedError` carrying type, module and message (`ReplayedInterruption`
    for a `BaseException` that is not an `Exception`). An exception group is made again of
    its rebuilt exceptions."""
    return _rebuilt(record, 0)


def _rebuilt(record: Any, depth: int) -> BaseException:
    if not isinstance(record, dict):
        return ReplayedError("UnknownError", repr(record))
    type_name = str(record.get("type", "Exception"))
    module = record.get("module")
    message = str(record.get("message", ""))
    group = _group_from_record(record, type_name, module, depth)
    if group is not None:
        return _keeping(group, record)
    cls = _resolve_type(str(module), type_name) if module else None
    if cls is not None:
        args = record.get("args")
        args = args if isinstance(args, list) else [message]
        try:
            exc: BaseException | None = cls(*args)
        except Exception:
            exc = None
        attributes = record.get("attributes")
        if exc is not None:
            _restore_attributes(exc, attributes)  # (an OSError's message shows its file)
        if exc is None or _shown(exc) != message:
            exc = _unconstructed(cls, args, message, attributes)
        if exc is not None:
            return _keeping(exc, record)
    replayed = ReplayedInterruption if record.get(BASE_EXCEPTION) is True else ReplayedError
    return _keeping(replayed(type_name, message, module if isinstance(module, str) else None),
                    record)


def _group_from_record(record: dict[str, Any], type_name: str, module: Any,
                       depth: int) -> BaseException | None:
    """The exception group a record describes, of its recorded class where that is imported
    and takes (message, exceptions), else a built-in one; None for a record of no group (or
    one made before groups were recorded), and where this Python has no groups."""
    group, base = record.get("group"), _group_base()
    if not isinstance(group, dict) or base is None or depth >= _MAX_GROUP_DEPTH:
        return None
    message, members = group.get("message"), group.get("exceptions")
    if not isinstance(message, str) or not isinstance(members, list) or not members:
        return None
    rebuilt = [_rebuilt(member, depth + 1) for member in members]
    for cls in (_group_class(module, type_name, base), base):
        with contextlib.suppress(Exception):  # a subclass taking other arguments
            made = cls(message, rebuilt)
            if isinstance(made, base):
                _restore_attributes(made, record.get("attributes"))
                return made
    return None


def _group_class(module: Any, type_name: str,
                 base: type[BaseException]) -> type[BaseException]:
    found = _lookup(module, type_name) if isinstance(module, str) else None
    # a subclass that is no `Exception` could behave as its own (see `_resolve_type`)
    if isinstance(found, type) and issubclass(found, base) and (
            issubclass(found, Exception) or found is base):
        return found
    return base


def _unconstructed(cls: type[BaseException], args: list[Any], message: str,
                   attributes: Any) -> BaseException | None:
    """An instance of `cls` made without its `__init__`, which may require what a record does
    not hold (an API error's HTTP response as a keyword-only argument), so that handlers
    picking errors by type (`with_fallbacks(exceptions_to_handle=...)`, a retry's
    exception types, an `except RateLimitError`) catch it in replay as they did live; used only
    if it shows the recorded message."""
    try:
        exc = cls.__new__(cls)
        exc.args = tuple(args)
    except Exception:
        return None
    _restore_attributes(exc, attributes)  # (a __str__ may read them)
    return exc if _shown(exc) == message else None


def _restore_attributes(exc: BaseException, attributes: Any) -> None:
    """Put back the recorded plain attributes (and containers of them) that the rebuilt
    exception lacks (or holds as None: an `OSError` made from its args has no file name)."""
    if not isinstance(attributes, dict):
        return
    for name, value in attributes.items():
        if type(name) is str and not name.startswith("_") and (
                isinstance(value, _PLAIN) or type(value) in _ARG_CONTAINERS):
            with contextlib.suppress(Exception):
                if getattr(exc, name, None) is None:
                    setattr(exc, name, value)


#: the attribute a rebuilt exception keeps its record in, for adapters that recorded more
#: than the exception's type and message (LangGraph's interrupts)
_RECORD = "_agentreplay_record"


def _keeping(exc: BaseException, record: dict[str, Any]) -> BaseException:
    with contextlib.suppress(Exception):  # an exception class with __slots__ keeps none
        setattr(exc, _RECORD, record)
    return exc


def recorded_error(exc: BaseException) -> dict[str, Any] | None:
    """The record `exc` was rebuilt from by `error_from_record`, if it was."""
    record = _attribute(exc, _RECORD)
    return record if isinstance(record, dict) else None
