"""Recorded exceptions: what is stored when a recorded call raised, and how replay re-raises it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import re
from typing import Any

from agentreplay_core._errors import ReplayedError

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_cancellation(record: Any) -> bool:
    """Whether a recorded error is a call that was cancelled (a timeout, a cancelled task)."""
    return isinstance(record, dict) and record.get("cancelled") is True


def error_to_record(exc: BaseException) -> dict[str, Any]:
    """The JSON-able description of an exception (type, module, message, plain args)."""
    cls = type(exc)
    try:
        message = str(exc)
    except Exception:  # an exception whose __str__ fails must not replace the user's own
        message = f"<{cls.__qualname__} with an unprintable message>"
    record: dict[str, Any] = {
        "type": cls.__qualname__,
        "module": cls.__module__,
        "message": message,
    }
    if all(isinstance(a, (str, int, float, bool, type(None))) for a in exc.args):
        record["args"] = list(exc.args)
    if isinstance(exc, asyncio.CancelledError):
        record["cancelled"] = True
    return record


def _resolve_type(module: str, qualname: str) -> type[BaseException] | None:
    if not (_DOTTED.match(module) and _DOTTED.match(qualname)):
        return None
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    # BaseExceptions (cancellation, KeyboardInterrupt, SystemExit) are never rebuilt from
    # data: a cancelled call replays through `is_cancellation` instead.
    if isinstance(obj, type) and issubclass(obj, Exception):
        return obj
    return None


def error_from_record(record: Any) -> BaseException:
    """Rebuild a recorded exception: the same type where it can be imported and constructed
    from its recorded args, else `ReplayedError` carrying type, module and message."""
    if not isinstance(record, dict):
        return ReplayedError("UnknownError", repr(record))
    type_name = str(record.get("type", "Exception"))
    module = record.get("module")
    message = str(record.get("message", ""))
    cls = _resolve_type(str(module), type_name) if module else None
    if cls is not None:
        args = record.get("args")
        try:
            exc = cls(*args) if isinstance(args, list) else cls(message)
        except Exception:
            exc = None
        if exc is not None and str(exc) == message:
            return _keeping(exc, record)
    return _keeping(ReplayedError(type_name, message, module if isinstance(module, str) else None),
                    record)


#: the attribute a rebuilt exception keeps its record in, for adapters that recorded more
#: than the exception's type and message (LangGraph's interrupts)
_RECORD = "_agentreplay_record"


def _keeping(exc: BaseException, record: dict[str, Any]) -> BaseException:
    with contextlib.suppress(Exception):  # an exception class with __slots__ keeps none
        setattr(exc, _RECORD, record)
    return exc


def recorded_error(exc: BaseException) -> dict[str, Any] | None:
    """The record `exc` was rebuilt from by `error_from_record`, if it was."""
    record = getattr(exc, _RECORD, None)
    return record if isinstance(record, dict) else None
