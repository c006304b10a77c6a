"""The replacements that `record_entropy` / `replay_entropy` install (DESIGN section 6).

Each factory closes over the function it replaces and over the session (an `Interceptor`), so
a replacement that outlives its session (bound with `from time import time` while the session
was active) keeps working: it just calls the original.
"""

from __future__ import annotations

import functools
import math
import operator
import random
import re
import sys
import types
import uuid
import warnings
from collections.abc import Callable
from datetime import datetime as _RealDatetime
from datetime import timezone, tzinfo
from typing import Any, Protocol, TypeVar

from agentreplay_core._entropy_values import (
    as_bytes,
    as_datetime,
    as_float,
    as_int,
    as_none,
    as_uuid,
    rebuild,
)

T = TypeVar("T")


class Interceptor(Protocol):
    """What a replacement asks the active session to do with one call."""

    def owns(self, caller: str | None) -> bool:
        """True when a call made now from module `caller` belongs to the run."""
        ...

    def intercept(
        self,
        caller: str | None,
        kind: str,
        name: str,
        args: dict[str, Any],
        live: Callable[[], T],
        restore: Callable[[Any], T],
    ) -> T:
        """Record `live()` or replay it; `restore` turns a recorded value into the result."""
        ...


#: standard modules that call the patched functions on behalf of their caller
_PASS_THROUGH = frozenset({"uuid", "random", "secrets"})

#: the functions that run a callable handed to an executor or a thread, by module: their
#: module is infrastructure, but `to_thread(uuid.uuid4)` or `submit(os.urandom, 8)` is the
#: user's call, made from a worker thread (`WorkerContext.run` is Python 3.14's runner)
_RUNNERS: dict[str, tuple[str, ...]] = {
    "concurrent.futures.thread": ("_WorkItem.run", "WorkerContext.run"),
    "anyio._backends._asyncio": ("WorkerThread.run",),
    "threading": ("Thread.run", "Timer.run"),
}


def _caller() -> str | None:
    """The module of the code that made the call, looking through `_PASS_THROUGH` frames.

    The frame above the replacement is whoever called it (the nearest Python frame when the
    call comes from C, e.g. `date.today()` calling `time.time`); there is none on a thread
    started from C (`_thread.start_new_thread(time.sleep, ...)`), and None means the call is
    the run's. `uuid.uuid4` bound before the session calls `os.urandom` itself: the call
    belongs to whoever called `uuid4`.
    """
    # f_back rather than sys._getframe(2), which raises when the stack is not that deep
    frame: types.FrameType | None = sys._getframe(1).f_back
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name not in _PASS_THROUGH:
            if not isinstance(name, str) or _runs_handed_callable(frame, name):
                return None
            return name
        frame = frame.f_back
    return None


def _runs_handed_callable(frame: types.FrameType, name: str) -> bool:
    """True when `frame` is an executor's or a thread's runner calling what it was handed."""
    if name not in _RUNNERS:
        return False
    module = sys.modules.get(name)
    for qualname in _RUNNERS[name]:
        owner_name, _, method = qualname.partition(".")
        function = getattr(getattr(module, owner_name, None), method, None)
        if getattr(function, "__code__", None) is frame.f_code:
            return True
    return False


# -- argument checks: invalid arguments go to the original, which raises its own error -------


def _byte_count(size: object) -> int | None:
    try:
        n = operator.index(size)  # type: ignore[arg-type]
    except TypeError:
        return None
    return n if n >= 0 else None


def _sleep_seconds(secs: object) -> float | int | None:
    """The seconds to record, or None for an argument the real `time.sleep` rejects."""
    if isinstance(secs, (int, float)):
        value: float | int = secs if type(secs) in (int, float) else float(secs)
    else:
        # what time.sleep itself takes besides floats: integers of any type (numpy.int64)
        try:
            value = operator.index(secs)  # type: ignore[arg-type]
        except TypeError:
            return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if value >= 0 else None


#: an object address in a default repr (`<mod.UTC object at 0x7f...>`)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _tz_label(tz: tzinfo | None) -> str | None:
    """The `tz` input of a `datetime.now` step: the same in every process for the same zone.

    `str(tz)` unless it holds the object's address, which differs in the replaying process
    (a tzinfo class without `__str__` or `__repr__`): then the class and what it reports.
    """
    if tz is None:
        return None
    label = str(tz)
    if not _ADDRESS.search(label):
        return label
    cls = type(tz)
    return f"{cls.__module__}.{cls.__qualname__}({_tz_report(tz)})"


def _tz_report(tz: tzinfo) -> str:
    # a zone's answers for no particular instant (dt=None), as `str(timezone)` reports them;
    # a tzinfo that needs an instant fails here, and its class name alone is the label
    try:
        return f"utcoffset={tz.utcoffset(None)}, tzname={tz.tzname(None)!r}"
    except Exception:
        return ""


# -- replacements ---------------------------------------------------------------------------


def time_time(s: Interceptor, orig: Callable[[], float]) -> Callable[[], float]:
    @functools.wraps(orig)
    def time() -> float:
        return s.intercept(_caller(), "time", "time.time", {}, orig, as_float)

    return time


def time_time_ns(s: Interceptor, orig: Callable[[], int]) -> Callable[[], int]:
    @functools.wraps(orig)
    def time_ns() -> int:
        return s.intercept(_caller(), "time", "time.time_ns", {}, orig, as_int)

    return time_ns


def time_sleep(s: Interceptor, orig: Callable[[float], None]) -> Callable[[float], None]:
    @functools.wraps(orig)
    def sleep(secs: float) -> None:
        seconds = _sleep_seconds(secs)
        # `sleep(0)` gives other threads a turn (a busy-poll loop waiting for a thread) and
        # waits for nothing: how often a loop does it depends on the scheduling alone, so
        # recorded it made the replay diverge (LlamaIndex's streamed chat while it writes
        # its memory)
        if seconds is None or seconds == 0:
            return orig(secs)
        return s.intercept(_caller(), "sleep", "time.sleep", {"seconds": seconds},
                           lambda: orig(secs), as_none)

    return sleep


def uuid_uuid4(s: Interceptor, orig: Callable[[], uuid.UUID]) -> Callable[[], uuid.UUID]:
    @functools.wraps(orig)
    def uuid4() -> uuid.UUID:
        return s.intercept(_caller(), "uuid", "uuid.uuid4", {}, orig, as_uuid)

    return uuid4


def os_urandom(s: Interceptor, orig: Callable[[int], bytes]) -> Callable[[int], bytes]:
    @functools.wraps(orig)
    def urandom(size: int) -> bytes:
        n = _byte_count(size)
        if n is None:
            return orig(size)
        return s.intercept(_caller(), "random", "os.urandom", {"n": n}, lambda: orig(size),
                           lambda value: as_bytes(value, n))

    return urandom


def random_functions(
    s: Interceptor, module: types.ModuleType, private: random.Random
) -> list[tuple[str, Callable[..., Any]]]:
    """Replacements for `random.random`, `random.choice`, ... drawing from `private`.

    The module-level functions are bound methods of one hidden generator that other code
    shares (a connection pool's jitter, drawn in a background thread, would shift the run's
    sequence). The run gets a generator of its own; infrastructure keeps the shared one.
    """
    shared = vars(module)["_inst"]
    return [(name, _route(s, function, getattr(private, name)))
            for name, function in vars(module).items()
            if callable(function) and getattr(function, "__self__", None) is shared]


def _route(s: Interceptor, shared: Callable[..., Any],
           private: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(shared)
    def function(*args: Any, **kwargs: Any) -> Any:
        return (private if s.owns(_caller()) else shared)(*args, **kwargs)

    return function


_UTCNOW_DEPRECATED = (
    "datetime.datetime.utcnow() is deprecated and scheduled for removal in a future version. "
    "Use timezone-aware objects to represent datetimes in UTC: "
    "datetime.datetime.now(datetime.UTC)."
)


class _ProxyMeta(type):
    """Makes `isinstance(real_datetime, datetime.datetime)` true while the proxy is installed."""

    def __instancecheck__(cls, obj: object) -> bool:
        if "_agentreplay_proxy" in cls.__dict__:
            return isinstance(obj, _RealDatetime)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        if "_agentreplay_proxy" in cls.__dict__:
            return issubclass(sub, _RealDatetime)
        return super().__subclasscheck__(sub)


def datetime_proxy(s: Interceptor, orig: type[_RealDatetime]) -> type[_RealDatetime]:
    """A stand-in for `datetime.datetime` whose `now` / `utcnow` record or replay.

    `datetime.datetime` is a C type whose methods cannot be replaced, so the module attribute
    is swapped for this subclass. Constructing it and its other class methods give real
    `datetime` instances, and isinstance/issubclass checks hold in both directions.
    """

    class datetime(_RealDatetime, metaclass=_ProxyMeta):
        __slots__ = ()
        _agentreplay_proxy = True

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            if cls is proxy:
                return orig(*args, **kwargs)
            return super().__new__(cls, *args, **kwargs)

        @classmethod
        def now(cls, tz: Any = None) -> Any:
            if tz is not None and not isinstance(tz, tzinfo):
                return orig.now(tz)  # raises the real TypeError
            value = s.intercept(_caller(), "time", "datetime.now", {"tz": _tz_label(tz)},
                                lambda: orig.now(tz), lambda v: as_datetime(v, tz))
            return value if cls is proxy else rebuild(cls, value)

        @classmethod
        def utcnow(cls) -> Any:
            if sys.version_info >= (3, 12):  # as the real one does, pointing at the caller
                warnings.warn(_UTCNOW_DEPRECATED, DeprecationWarning, stacklevel=2)
            # via now(utc): the real utcnow would warn again, blaming this frame
            value = s.intercept(_caller(), "time", "datetime.utcnow", {},
                                lambda: orig.now(timezone.utc).replace(tzinfo=None),
                                lambda v: as_datetime(v, None))
            return value if cls is proxy else rebuild(cls, value)

        @classmethod
        def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
            # pydantic knows datetime by identity: a model built during the run (a tool's
            # argument schema) would otherwise reject the stand-in as an unknown type
            return handler.generate_schema(orig)

        def __init_subclass__(cls, **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            # a subclass made during the run gets what pydantic does with any other subclass
            cls.__get_pydantic_core_schema__ = None  # type: ignore[assignment]

    proxy = datetime
    # pickle finds classes by module and qualified name: make the proxy findable as itself
    proxy.__module__ = "datetime"
    proxy.__qualname__ = "datetime"
    return proxy


def datetime_reducer(proxy: type[_RealDatetime]) -> Callable[[_RealDatetime], tuple[Any, ...]]:
    """A pickle reducer for real datetimes while the proxy is installed.

    Pickle refuses a class that is not what its module attribute names, and
    `datetime.datetime` is the proxy now; pickling through the proxy (whose constructor
    makes real datetimes) keeps datetimes picklable, and the pickles load anywhere.
    """

    def reduce(value: _RealDatetime) -> tuple[Any, ...]:
        return (proxy, value.__reduce_ex__(2)[1])

    return reduce
