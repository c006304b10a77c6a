"""LangChain's own standard unit suites, run against the replay classes.

Each suite builds the class under test from keyword arguments (`chat_model_params`,
`embedding_model_params`); for a replay class those need a `Player`, so an autouse fixture
records a short run into the test's PostgreSQL schema first and opens its replay.

Tests the suites skip by themselves, and why that is right for a replay class:
- `test_init_from_env`: a replay model reads nothing from the environment (no API key, no
  endpoint), so there are no `init_from_env_params` to give.
- `test_serdes` (chat models): a replay model is not `lc_serializable`; it holds a live
  `Player` over a recorded run, which must not be written into a serialised chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_tests.unit_tests import ChatModelUnitTests, EmbeddingsUnitTests

from agentreplay_core import Player, Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    RecordingEmbeddings,
    ReplayChatModel,
    ReplayEmbeddings,
)
from tests.langchain.fakes import Counter, HashEmbeddings, ScriptedChatModel, make_tools


class TestReplayChatModelStandard(ChatModelUnitTests):
    @pytest.fixture(autouse=True)
    def recorded_player(self, store: Store) -> Iterator[Player]:
        model = ScriptedChatModel(plan=[[("weather", {"city": "Lima"})]])
        with store.record(name="standard-suite") as rec:
            model.bind_tools(make_tools(Counter())).invoke(
                "weather in Lima?", config={"callbacks": [RecordingCallbackHandler(rec)]})
        # the suite builds models and binds tools but never calls them
        with store.replay(rec.run_id, allow_unused=True) as player:
            self.player = player
            yield player

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ReplayChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"player": self.player}

    # What the replay model really does: it binds tools (tool_choice included, forwarded as
    # the recorded model's bind_tools would), answers with_structured_output from tool-call or
    # JSON recordings (json_mode included), and returns the recorded usage.
    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    # Image, audio, PDF and video inputs are flags of the integration suite; whether a replay
    # accepts them depends on the recorded model, so they keep the suite's defaults.


def test_the_chat_suite_replay_model_answers_from_the_recording(store: Store) -> None:
    """The model the suite builds is a working replay, not just a constructible object."""
    with store.record(name="suite-check") as rec:
        live = ScriptedChatModel().invoke("hi", config={
            "callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id) as player:
        suite = TestReplayChatModelStandard()
        suite.player = player
        model = suite.chat_model_class(**{**suite.standard_chat_model_params,
                                          **suite.chat_model_params})
        replayed = model.invoke("hi")
    assert (replayed.content, replayed.id) == (live.content, live.id)


class TestReplayEmbeddingsStandard(EmbeddingsUnitTests):
    @pytest.fixture(autouse=True)
    def recorded_player(self, store: Store) -> Iterator[Player]:
        with store.record(name="embeddings-suite") as rec:
            RecordingEmbeddings(HashEmbeddings(), rec).embed_query("hello")
        with store.replay(rec.run_id, allow_unused=True) as player:
            self.player = player
            yield player

    @property
    def embeddings_class(self) -> type[ReplayEmbeddings]:
        return ReplayEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"player": self.player}
