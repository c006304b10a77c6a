"""ReplayDecisionModel: serves what a decision model (a classifier) answered while recording.

Needs langchain-core with `langchain_core.decisions` (1.8 on); `agentreplay_langchain` exports
it lazily, so the rest of the adapter imports on older cores.
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.decisions import BaseDecisionModel, ClassifierRequest, ClassifierResponse
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict, Field

from agentreplay_core import Player
from agentreplay_langchain._decisions import (
    DECISION,
    DECISION_MODEL,
    decision_output,
    decision_request,
    decision_response,
)
from agentreplay_langchain._replayable import _player
from agentreplay_langchain._served import _alone
from agentreplay_langchain._tree import tracked_path


def _model_of(live: BaseDecisionModel) -> dict[str, Any]:
    """What the recording handler stores of the model (from the run's tracing metadata)."""
    return {"ls_provider": live._provider, "ls_model_name": live.model}


class ReplayDecisionModel(BaseDecisionModel):
    """A decision model that returns the recorded `ClassifierResponse` of each call (answers,
    probabilities, confidence, usage and the provider's request id, exactly).

    Give it where the agent takes its classifier: `ModelRouterMiddleware(classifier=...)`,
    `AutoModeMiddleware(classifier=...)`. Calls are matched on the state and the questions.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "agentreplay"
    player: Player = Field(exclude=True)
    #: the real classifier, asked from the first divergence on (`on_divergence="live"` only)
    live: BaseDecisionModel | None = Field(default=None, exclude=True)

    @property
    def _provider(self) -> str:
        return "agentreplay"

    # `invoke` as the base class runs it, but with the run manager, which knows the call's
    # path in the run tree (the base hands `_classify` only the state and the questions)
    def invoke(self, input: ClassifierRequest, config: RunnableConfig | None = None,
               **_: Any) -> ClassifierResponse:
        return self._call_with_config(self._answer, input, self._traced_config(config),
                                      run_type="llm")

    async def ainvoke(self, input: ClassifierRequest, config: RunnableConfig | None = None,
                      **_: Any) -> ClassifierResponse:
        return await self._acall_with_config(self._aanswer, input,
                                             self._traced_config(config), run_type="llm")

    def _answer(self, request: ClassifierRequest, run_manager: CallbackManagerForChainRun
                ) -> ClassifierResponse:
        path = tracked_path(run_manager.handlers, run_manager.run_id)
        return self._serve(request["state"], dict(request["questions"]), path)

    async def _aanswer(self, request: ClassifierRequest,
                       run_manager: AsyncCallbackManagerForChainRun) -> ClassifierResponse:
        path = tracked_path(run_manager.handlers, run_manager.run_id)
        return await self._aserve(request["state"], dict(request["questions"]), path)

    def _classify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        return self._serve(state, questions, None)

    async def _aclassify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        return await self._aserve(state, questions, None)

    def _serve(self, state: Any, questions: dict[str, Any], path: str | None
               ) -> ClassifierResponse:
        live = self.live

        def ask() -> dict[str, Any]:
            assert live is not None
            with _alone():  # no callbacks: this model's own run reports the answer
                answer = live.invoke({"state": state, "questions": questions})
            return decision_output(answer, _model_of(live))

        stored = self.player.next(DECISION, DECISION_MODEL, decision_request(state, questions),
                                  path=path, live=ask if live is not None else None)
        return cast(ClassifierResponse, decision_response(stored))

    async def _aserve(self, state: Any, questions: dict[str, Any], path: str | None
                      ) -> ClassifierResponse:
        live = self.live

        async def ask() -> dict[str, Any]:
            assert live is not None
            with _alone():
                answer = await live.ainvoke({"state": state, "questions": questions})
            return decision_output(answer, _model_of(live))

        stored = await self.player.anext(
            DECISION, DECISION_MODEL, decision_request(state, questions), path=path,
            live=ask if live is not None else None)
        return cast(ClassifierResponse, decision_response(stored))


def replayable_decision_model(live: BaseDecisionModel) -> BaseDecisionModel:
    """`live`, or a `ReplayDecisionModel` answering from the replayed run (as the other
    `replayable_*` factories decide)."""
    player = _player("decision model")
    if player is None:
        return live
    return ReplayDecisionModel(player=player, live=live if player.can_go_live else None)
