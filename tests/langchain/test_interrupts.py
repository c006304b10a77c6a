"""A Ctrl-C or `sys.exit()` inside a tool or a model stops the replay where it stopped the
recording, past the agent's own `except Exception:`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, StructuredTool

from agentreplay_core import Store
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel, replay_tools


def carrying_on(call: Callable[[], Any]) -> str:
    """Agent code that handles a failing call and goes on: an interrupt must pass it."""
    try:
        return str(call())
    except Exception as exc:
        return f"failed, continuing: {type(exc).__name__}"


def interrupting_tool(interrupt: BaseException) -> BaseTool:
    def fetch(url: str) -> str:
        raise interrupt
    return StructuredTool.from_function(fetch, name="fetch", description="Fetch a page.")


CALL = {"name": "fetch", "args": {"url": "slow"}, "id": "call_1", "type": "tool_call"}


def tells_callbacks_of(interrupt: BaseException) -> bool:
    """Whether this langchain-core reports `interrupt` in a tool to the callbacks: 1.8 does
    for every `BaseException`; 0.3 and the first 1.x releases only for `Exception` and
    `KeyboardInterrupt`, so a `SystemExit` there leaves the call open (recorded as cancelled
    when the run ends, like any call LangChain never ends)."""
    seen: list[BaseException] = []

    class Seen(BaseCallbackHandler):
        def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
            seen.append(error)

    with contextlib.suppress(type(interrupt)):
        interrupting_tool(interrupt).invoke(CALL, config={"callbacks": [Seen()]})
    return bool(seen)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(3)],
                         ids=["ctrl-c", "exit"])
def test_a_tool_interrupted_live_is_interrupted_in_replay(store: Store,
                                                          interrupt: BaseException) -> None:
    if not tells_callbacks_of(interrupt):
        pytest.skip(f"this langchain-core does not report a {type(interrupt).__name__} in a "
                    "tool to callbacks")
    tool = interrupting_tool(interrupt)
    with store.record(name="interrupted") as rec, pytest.raises(type(interrupt)):
        carrying_on(lambda: tool.invoke(
            CALL, config={"callbacks": [RecordingCallbackHandler(rec)]}))
    [step] = store.load_steps(rec.run_id)
    assert step.is_error and step.output["type"] == type(interrupt).__name__
    with store.replay(rec.run_id) as player, pytest.raises(type(interrupt)) as again:
        carrying_on(lambda: replay_tools(player, [tool])[0].invoke(CALL))
    assert str(again.value) == str(interrupt)


class InterruptedChatModel(BaseChatModel):
    """Ctrl-C while the request is on the wire."""

    @property
    def _llm_type(self) -> str:
        return "interrupted"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise KeyboardInterrupt


def test_a_model_call_interrupted_live_is_interrupted_in_replay(store: Store) -> None:
    question = [HumanMessage("hello", id="h1")]
    with store.record(name="model-ctrl-c") as rec, pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: InterruptedChatModel().invoke(
            question, config={"callbacks": [RecordingCallbackHandler(rec)]}))
    assert [s.is_error for s in store.load_steps(rec.run_id)] == [True]
    with store.replay(rec.run_id) as player, pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: ReplayChatModel(player=player).invoke(question))
