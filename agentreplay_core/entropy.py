"""Recording and replay of time, randomness and ids (DESIGN section 6).

`store.record(..., entropy=True)` and `store.replay(...)` switch these on for you; use them
directly to scope entropy capture to part of a run. See docs/entropy.md for what is covered.
"""

from agentreplay_core._entropy import DEFAULT_SKIP_MODULES, record_entropy, replay_entropy

__all__ = ["DEFAULT_SKIP_MODULES", "record_entropy", "replay_entropy"]
