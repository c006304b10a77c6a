"""What a `ReplayDivergence` tells the user: the request of a call the recording does not hold,
and the replay backends of the adapter in use."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from agentreplay_core import ReplayDivergence, open_store
from agentreplay_core._divergence import SHOWN_REQUEST

ADAPTERS = ("agentreplay_langchain", "agentreplay_llamaindex")


def test_an_unexpected_call_shows_the_request_made() -> None:
    store = open_store("memory:")
    with store.record(name="extra") as rec:
        rec.record("llm", "m", {"prompt": "What is the capital of France?"}, "Paris")
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player:
        player.next("llm", "m", {"prompt": "What is the capital of France?"})
        player.next("llm", "m", {"prompt": "Please also delete all customer records"})
    assert caught.value.classification == "unexpected_call"
    assert str(caught.value).splitlines()[1:] == [
        "all 1 recorded llm 'm' call was already replayed",
        "request: {'prompt': 'Please also delete all customer records'}",
    ]


def test_the_request_shown_is_cut_to_a_bounded_length() -> None:
    store = open_store("memory:")
    with store.record(name="none") as rec:
        rec.record("tool", "search", {"q": "a"}, "doc")
    huge = {"q": "a", "document": "word " * 100_000}
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id,
                                                                allow_unused=True) as player:
        player.next("tool", "fetch", huge)
    shown = next(line for line in str(caught.value).splitlines()
                 if line.startswith("request: "))
    assert shown.startswith("request: {'q': 'a', 'document': 'word word ")
    assert len(shown) <= len("request: ") + SHOWN_REQUEST
    assert "the recording holds no tool call named 'fetch'" in str(caught.value)


def _missing_call_detail() -> str:
    """The message of a recorded call that ran for real in the replay (not swapped)."""
    store = open_store("memory:")
    with store.record(name="x") as rec:
        rec.record("llm", "MockLLM", {"prompt": "hi"}, "hello", path="llm:MockLLM")
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player:
        player.started_at("llm:MockLLM")
    return str(caught.value)


def test_the_missing_call_hint_lists_each_adapter_by_its_own_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in ADAPTERS:  # no adapter imported: the calls could come from either
        monkeypatch.delitem(sys.modules, module, raising=False)
    detail = _missing_call_detail()
    assert ("(LangChain: replay_tools(player, tools), ReplayChatModel, ReplayLLM, "
            "ReplayEmbeddings, ReplayRetriever; LlamaIndex: replay_tools(player, tools), "
            "ReplayLLM, ReplayEmbedding, ReplayRetriever, ReplayReranker)") in detail
    assert "ReplayChatModel / ReplayLLM" not in detail


LLAMAINDEX_ONLY = """
import agentreplay_llamaindex
from tests.core.test_divergence_messages import _missing_call_detail
print(_missing_call_detail())
"""


@pytest.mark.skipif(importlib.util.find_spec("llama_index") is None,
                    reason="needs the llamaindex extra")
def test_the_missing_call_hint_names_the_adapter_in_use() -> None:
    shown = subprocess.run([sys.executable, "-c", LLAMAINDEX_ONLY], capture_output=True,
                           text=True, timeout=120, check=True).stdout
    assert ("(LlamaIndex: replay_tools(player, tools), ReplayLLM, ReplayEmbedding, "
            "ReplayRetriever, ReplayReranker)") in shown
    assert "LangChain" not in shown and "ReplayChatModel" not in shown
