"""A long instrumented session does not keep every span it saw: the oldest exited spans are
forgotten beyond `KEEP_EXITED`, and what is recorded stays the same (a stream consumed long
after its span exited included: an LLM call keeps its own path)."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, _tree, instrument
from tests.llamaindex.models import ToolCallingLLM

HELLO = [ChatMessage(role=MessageRole.USER, content="hello there")]
CHATS = 40


def _session(store: Store, name: str) -> tuple[Any, int]:
    """Record a stream started first and consumed after `CHATS` chats; (run id, the most
    spans the tree held at once after the chats)."""
    llm = ToolCallingLLM()
    with store.record(name=name) as rec, instrument(rec) as handle:
        assert handle.handler is not None
        tree = handle.handler.session.tree
        stream = llm.stream_chat(HELLO)
        next(stream)
        for i in range(CHATS):
            llm.chat([ChatMessage(role=MessageRole.USER, content=f"question {i}")])
        held = len(tree._spans)
        for _ in stream:  # its span exited long ago: its chunks and end come now
            pass
    return rec.run_id, held


def _shape(store: Store, run_id: Any) -> list[tuple[str, str, str]]:
    return [(s.kind, s.name, s.path) for s in store.load_steps(run_id)]


def test_a_long_session_forgets_old_spans_and_records_the_same_steps(
    li_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept_all, held_all = _session(li_store, "every span kept")
    monkeypatch.setattr(_tree, "KEEP_EXITED", 5)
    bounded, held = _session(li_store, "5 exited spans kept")
    assert held_all > CHATS  # without the bound every chat's span stays
    assert held <= 5 + 1  # the bound, and the stream's span (exited, among the 5 or not)
    assert _shape(li_store, bounded) == _shape(li_store, kept_all)
    assert len(_shape(li_store, bounded)) == CHATS + 1
    with li_store.replay(bounded) as player:
        model = ReplayLLM(player)
        stream = model.stream_chat(HELLO)
        next(stream)
        for i in range(CHATS):
            model.chat([ChatMessage(role=MessageRole.USER, content=f"question {i}")])
        assert list(stream)  # the rest of the chunks, in order: the run replays whole
