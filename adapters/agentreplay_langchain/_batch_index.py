"""Each input of a `batch()` gets its own place in the run tree.

`Runnable.batch` runs its inputs on a thread pool, and their runs start in whatever order the
threads reach their callbacks: with equal inputs (sampling several answers to one prompt), the
occurrence numbers of their paths follow that order, which differs between the recording and
the replay, and replay would hand the recorded answers out swapped. LangChain tells positions
apart with tags (`seq:step:2`, `map:key:context`); batches have none, so this adds one,
`batch:index:N`, to the config of each input, wherever agentreplay tracks the run tree (a
`RecordingCallbackHandler` or tracker in the config's callbacks, or `instrument()` active).
Other batches are left exactly as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import langchain_core.runnables.base as _runnables
from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables import RunnableConfig

from agentreplay_langchain._tree import RunTreeTracker

ConfigList = Callable[[RunnableConfig | Sequence[RunnableConfig] | None, int],
                      list[RunnableConfig]]


def _tracked(configs: Sequence[RunnableConfig]) -> bool:
    from agentreplay_langchain._instrument import active_instrumentation

    if active_instrumentation() is not None:
        return True
    for config in configs:
        callbacks: Any = config.get("callbacks")
        handlers = callbacks.handlers if isinstance(callbacks, BaseCallbackManager) \
            else callbacks or ()
        if any(isinstance(h, RunTreeTracker) for h in handlers):
            return True
    return False


def indexed(original: ConfigList) -> ConfigList:
    """`get_config_list` that tags each config of a tracked batch with its input's index."""
    def get_config_list(config: RunnableConfig | Sequence[RunnableConfig] | None,
                        length: int) -> list[RunnableConfig]:
        configs = original(config, length)
        if length > 1 and _tracked(configs):
            for i, one in enumerate(configs):
                one["tags"] = [*(one.get("tags") or ()), f"batch:index:{i}"]
        return configs

    get_config_list.__wrapped__ = original  # type: ignore[attr-defined]
    return get_config_list


def install() -> None:
    """Wrap `get_config_list` where `Runnable.batch` and its kin look it up (once)."""
    current: ConfigList = getattr(_runnables, "get_config_list")  # noqa: B009 - not exported
    if not hasattr(current, "__wrapped__"):
        setattr(_runnables, "get_config_list", indexed(current))  # noqa: B010


def with_tracker(config: RunnableConfig | Sequence[RunnableConfig] | None, length: int
                 ) -> RunnableConfig | Sequence[RunnableConfig] | None:
    """The configs of a replayed batch with a run-tree tracker of their own when nothing
    tracks it: the recorded calls were told apart by their `batch:index:N` paths (relative
    to where the recording's handler was attached, usually the batch itself)."""
    if length < 2:
        return config
    from langchain_core.runnables import get_config_list

    configs = get_config_list(config, length)
    if _tracked(configs):
        return config
    tracker = RunTreeTracker()
    for one in configs:
        callbacks: Any = one.get("callbacks")
        if isinstance(callbacks, BaseCallbackManager):
            callbacks = callbacks.copy()
            callbacks.add_handler(tracker, inherit=True)
        else:
            callbacks = [*(callbacks or ()), tracker]
        one["callbacks"] = callbacks
    return configs
