"""The helper process of `prepare="process"`, as tests reach it."""

from __future__ import annotations

import time

from agentreplay_core import Store
from agentreplay_core._prepare_client import PrepareClient


def helper_of(store: Store) -> PrepareClient:
    writer = store._batched
    assert writer is not None and writer.helper is not None
    return writer.helper


def wait_until_used(store: Store, timeout: float = 60.0) -> PrepareClient:
    """Record until the helper has answered once (it takes a moment to start).

    Raises:
        RuntimeError: it was given up, or did not answer within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    with store.record(name="helper warm-up") as rec:
        helper = helper_of(store)  # the batched writer starts with the first batched run
        while helper.prepared == 0:
            if time.monotonic() > deadline or helper.failure is not None:
                raise RuntimeError("the prepare helper process did not answer: "
                                   f"{helper.failure or f'no answer in {timeout:.0f} s'}")
            rec.record("tool", "warm-up", {"at": time.monotonic()}, None)
            rec.flush()
    return helper
