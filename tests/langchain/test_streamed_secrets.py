"""A secret a model streams, cut across its chunks, is stored as its placeholder: neither a
chunk nor the chunks joined hold it, and the replay streams the redacted answer (the secret
itself when the replay is given it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.llms import LLM
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult, GenerationChunk

from agentreplay_core import Store
from agentreplay_core._codec import canonical_bytes
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel, ReplayLLM
from tests.support.secret_leaks import fake_secrets, leaks

FAKES = fake_secrets()
ANSWER = "Here is what the config holds: " + " and ".join(f.in_text for f in FAKES) + ". Done."


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "streamed-secrets-key")


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


class Confiding(BaseChatModel):
    """Says the credentials it was shown, streamed a few characters a chunk."""

    @property
    def _llm_type(self) -> str:
        return "confiding"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(ANSWER))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for piece in pieces(ANSWER):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class ConfidingLLM(LLM):
    """The same, as a text-completion LLM."""

    @property
    def _llm_type(self) -> str:
        return "confiding-llm"

    def _call(self, prompt: str, stop: list[str] | None = None,
              run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> str:
        return ANSWER

    def _stream(self, prompt: str, stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[GenerationChunk]:
        for piece in pieces(ANSWER):
            chunk = GenerationChunk(text=piece)
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class Tokens(BaseCallbackHandler):
    def __init__(self) -> None:
        self.text = ""

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        self.text += token


def stored_text(store: Store, run_id: Any) -> tuple[bytes, str]:
    """The stored step, and the text its chunks join to."""
    [step] = store.load_steps(run_id)
    joined = "".join(c["message"]["fields"]["content"] if "message" in c else c["text"]
                     for c in step.output["chunks"])
    return canonical_bytes(step.output), joined


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_a_streamed_secret_is_stored_as_its_placeholder(store: Store, kind: str) -> None:
    def model(player: Any = None) -> Any:
        if kind == "chat":
            return Confiding() if player is None else ReplayChatModel(player=player)
        return ConfidingLLM() if player is None else ReplayLLM(player=player)

    def text_of(streamed: list[Any]) -> str:
        return "".join(c if isinstance(c, str) else str(c.content) for c in streamed)

    with store.record(name="confiding") as rec:
        live = text_of(list(model().stream(
            "what is in the config?", config={"callbacks": [RecordingCallbackHandler(rec)]})))
    assert live == ANSWER and rec.stats.internal_errors == 0
    blob, joined = stored_text(store, rec.run_id)
    assert leaks(blob, FAKES) == [] and leaks(joined.encode(), FAKES) == []
    assert joined.count("<secret:") >= len(FAKES) - 1  # (two may share one text rule)
    tokens = Tokens()
    with store.replay(rec.run_id) as player:
        redacted = text_of(list(model(player).stream("what is in the config?",
                                                      config={"callbacks": [tokens]})))
    assert redacted == joined == tokens.text
    with store.replay(rec.run_id, secrets=[f.value for f in FAKES]) as player:
        again = text_of(list(model(player).stream("what is in the config?")))
    assert again == ANSWER  # each secret whole, in the chunk where it ended
