"""Arguments the adapter cannot use are named plainly: a model parameter the store cannot
encode is kept as its repr, without the memory address default reprs carry (two recordings of
the same call compare equal in `agentreplay diff`), and a stand-in without a player says so."""

from __future__ import annotations

from uuid import UUID

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from agentreplay_core import Store
from agentreplay_core._run_compare import compare_steps
from agentreplay_langchain import RecordingCallbackHandler, ReplayEmbeddings


class Hook:
    """A parameter object of the kind integrations accept (a client, a callback)."""


def _record(store: Store) -> UUID:
    model = GenericFakeChatModel(messages=iter([AIMessage("hello", id="ai-1")]))
    with store.record(name="hooked") as rec:
        # a new object each run: only its address differs
        model.bind(hook=Hook()).invoke("hi", config={
            "callbacks": [RecordingCallbackHandler(rec)]})
    return rec.run_id


def test_two_recordings_with_an_unencodable_parameter_compare_equal(store: Store) -> None:
    first, second = _record(store), _record(store)
    [step] = store.load_steps(first)
    kept = step.output["model"]["invocation_params"]["hook"]  # beside the answer
    assert "Hook object" in kept and "0x" not in kept
    assert compare_steps(store.load_steps(first), store.load_steps(second)).identical


def test_replay_embeddings_without_a_player_is_a_named_type_error() -> None:
    # the pydantic stand-ins (ReplayChatModel, ReplayTool, ...) validate it themselves
    with pytest.raises(TypeError, match=r"^ReplayEmbeddings needs the Player of a replay"):
        ReplayEmbeddings(None)  # type: ignore[arg-type]
