"""Decision models: what of a call is stored, matched and served.

langchain-core 1.8's `BaseDecisionModel` is a provider classifier answering typed questions
(`Noul`, `Choice`, `Score`, `Box`) about some state; `ModelRouterMiddleware` asks one which
model serves a run, `AutoModeMiddleware` whether a tool call is too risky to run. Its answer
is as nondeterministic as a chat model's, so it is a step of its own (kind `decision`). A call
reaches the callbacks as a chain run of `run_type="llm"`, the only such chain in LangChain.

This module imports nothing of `langchain_core.decisions` (older cores lack it): the
recording handler uses it on any core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage

from agentreplay_core._key_order import in_key_order, keep_key_order
from agentreplay_langchain._requests import message_view

#: the step kind, and the step name and run segment whatever the model's class (the replay
#: model's differs), as with chat models
DECISION = "decision"
DECISION_MODEL = "decision_model"
#: beside the stored answer: the key order of its dicts (the questions' order, which the
#: answers keep, and a `Choice`'s probabilities), where it is not the sorted one
RESPONSE, RESPONSE_ORDER = "response", "response_order"


def is_decision_run(kwargs: Mapping[str, Any]) -> bool:
    """Whether a chain run's start callback is a decision model's."""
    return kwargs.get("run_type") == "llm"


def _view(value: Any) -> Any:
    """A state value as matched: messages without ids (as in chat requests), pydantic
    objects (questions) as their JSON data, containers walked."""
    if isinstance(value, BaseMessage):
        return message_view(value)
    if isinstance(value, Mapping):
        return {str(k): _view(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_view(v) for v in value]
    dumped = getattr(value, "model_dump", None)
    if callable(dumped):
        return dumped(mode="json")
    return value


def decision_request(state: Any, questions: Mapping[str, Any]) -> dict[str, Any]:
    """The stored request of a call: the state and the questions, keyed by answer id."""
    return {"state": _view(state), "questions": _view(questions)}


def request_of(inputs: Any) -> dict[str, Any]:
    """`decision_request` of a `ClassifierRequest` as the callbacks get it."""
    return decision_request(inputs["state"], inputs["questions"])


def decision_output(response: Any, model: Any) -> dict[str, Any]:
    """The stored result: the whole `ClassifierResponse` (answers with their distributions and
    confidence, usage, the provider's request id) and the model that gave it."""
    body = response.model_dump(mode="json")
    output: dict[str, Any] = {"model": model, RESPONSE: body}
    keep_key_order(output, RESPONSE_ORDER, body)
    return output


def decision_response(output: Any) -> Any:
    """The `ClassifierResponse` of a stored result, its dicts in the recorded order."""
    from langchain_core.decisions import ClassifierResponse

    return ClassifierResponse.model_validate(
        in_key_order(output[RESPONSE], output.get(RESPONSE_ORDER)))
