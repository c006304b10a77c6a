"""The frameworks' own baselines for `record_caller`: handlers that do nothing (what the
framework's dispatch costs before anything is recorded) and fake models that wait on their
"network" as a hosted model does. Imported only by the groups that time both frameworks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.llms import MockLLM
from llama_index_instrumentation import get_dispatcher

from agentreplay_llamaindex._routing import SpanlessHandler

#: how long the waiting models wait per call (a hosted model takes 100 to 1,000 times this)
MODEL_WAIT = 0.002


class NoOpHandler(BaseCallbackHandler):
    """Does nothing. It defines on_chat_model_start: the base class's raises
    NotImplementedError, and LangChain then calls on_llm_start with the messages rendered
    as text, a cost that a real chat-model handler never pays."""

    def on_chat_model_start(self, serialized: dict[str, Any],
                            messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        return None


class WaitingFakeChatModel(GenericFakeChatModel):
    """Waits `MODEL_WAIT` before it answers, as a hosted model's call waits on the network:
    the GIL is free meanwhile."""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        time.sleep(MODEL_WAIT)
        return super()._generate(messages, stop, run_manager, **kwargs)


class NoOpEventHandler(BaseEventHandler):
    @classmethod
    def class_name(cls) -> str:
        return "NoOpEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        return None


class NoOpSpanHandler(SpanlessHandler):
    """Builds no spans and does nothing on entering, leaving or dropping one."""


@contextmanager
def no_op_handlers() -> Iterator[None]:
    """A no-op event handler and span handler on LlamaIndex's root dispatcher, where
    agentreplay attaches its own."""
    root = get_dispatcher()
    events, spans = NoOpEventHandler(), NoOpSpanHandler()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        yield
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not events]
        root.span_handlers = [h for h in root.span_handlers if h is not spans]


class WaitingMockLLM(MockLLM):
    """Waits `MODEL_WAIT` before it answers, as a hosted model's call waits on the network:
    the GIL is free meanwhile."""

    def _generate_text(self, length: int) -> str:
        time.sleep(MODEL_WAIT)
        return super()._generate_text(length)
