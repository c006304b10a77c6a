"""The helper process of `prepare="process"`, as tests reach it."""

from __future__ import annotations

import time

from agentreplay_core import Store
from agentreplay_core._prepare_client import PrepareClient


def helper_of(store: Store) -> PrepareClient:
    writer = store._batched
    assert writer is not None and writer.helper is not None
    return writer.helper


def wait_until_used(store: Store) -> PrepareClient:
    """Record until the helper has answered once (it takes a moment to start)."""
    deadline = time.monotonic() + 60
    with store.record(name="warm-up") as rec:
        helper = helper_of(store)  # the batched writer starts with the first batched run
        while helper.prepared == 0:
            assert time.monotonic() < deadline, f"the helper never answered: {helper.failure}"
            rec.record("tool", "warm", {"t": time.monotonic()}, None)
            rec.flush()
    return helper
