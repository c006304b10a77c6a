"""`with_structured_output` for the replay model: parse the answer the way it was recorded."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

from agentreplay_langchain._handler import CHAT_MODEL

if TYPE_CHECKING:
    from agentreplay_core import Step
    from agentreplay_langchain._chat_model import ReplayChatModel

JSON_METHODS = ("json_schema", "json_mode")
METHODS = ("function_calling", *JSON_METHODS)


def _schema_name(schema: dict[str, Any] | type) -> str:
    return str(convert_to_openai_tool(schema)["function"]["name"])


def _recorded_schema_name(schema: Any) -> str | None:
    """The name of the schema a recorded call asked for: LangChain traces it as a JSON schema
    (its `title`); None when the recording does not say."""
    if not isinstance(schema, dict):
        return None
    function = schema.get("function")
    if isinstance(function, dict) and function.get("name"):  # an OpenAI tool dict
        return str(function["name"])
    title = schema.get("title") or schema.get("name")
    return str(title) if title else None


def recorded_format(model: ReplayChatModel, schema: dict[str, Any] | type
                    ) -> tuple[str, bool | None]:
    """How the recorded model produced this schema: through a bound tool of the schema's name
    (function calling) or JSON content, and with which `strict`; function calling (strict
    unset) when the recording does not say. The first call of the schema not replayed yet
    says, if any: one run may ask for the same schema of two models that produce it each
    their way (a tool-calling one, then one with JSON output), each structured model made
    just before its call."""
    name = _schema_name(schema)
    player = model.player
    first = None
    for step in player.steps:
        found = _format_of(step, name)
        if found is not None:
            if not player.is_consumed(step):
                return found
            first = first or found
    return first or ("function_calling", None)


def _format_of(step: Step, name: str | None) -> tuple[str, bool | None] | None:
    """How the model call of `step` produced the schema named `name`, if it did."""
    if step.kind != "llm" or step.name != CHAT_MODEL:
        return None
    output = step.output if isinstance(step.output, dict) else {}
    options = ((output.get("model") or {}).get("options") or {})
    fmt = options.get("ls_structured_output_format") or {}
    fmt_kwargs = fmt.get("kwargs") or {}
    strict = fmt_kwargs.get("strict")
    strict = strict if isinstance(strict, bool) else None
    tools = step.input.get("tools", []) if isinstance(step.input, dict) else []
    if any(isinstance(t, dict) and t.get("name") == name for t in tools):
        return "function_calling", strict
    method = fmt_kwargs.get("method")
    if method in JSON_METHODS and _recorded_schema_name(fmt.get("schema")) in (name, None):
        return str(method), strict
    return None


def recorded_method(model: ReplayChatModel, schema: dict[str, Any] | type) -> str:
    """The method part of `recorded_format`."""
    return recorded_format(model, schema)[0]


def structured_output(model: ReplayChatModel, schema: dict[str, Any] | type, *,
                      include_raw: bool, method: str | None,
                      strict: bool | None = None) -> Runnable[Any, Any]:
    if method is None or strict is None:
        recorded, recorded_strict = recorded_format(model, schema)
        method = method or recorded
        strict = recorded_strict if strict is None else strict
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    is_model = isinstance(schema, type) and issubclass(schema, BaseModel)
    fmt = {"kwargs": {"method": method}, "schema": schema}
    parser: Runnable[Any, Any]
    if method == "function_calling":
        llm = model.bind_tools([schema], tool_choice="any", strict=strict,
                               ls_structured_output_format=fmt)
        parser = (PydanticToolsParser(tools=[schema], first_tool_only=True)  # type: ignore[list-item]
                  if is_model else
                  JsonOutputKeyToolsParser(key_name=_schema_name(schema), first_tool_only=True))
    else:
        llm = model.bind(ls_structured_output_format=fmt)
        parser = (PydanticOutputParser(pydantic_object=schema)  # type: ignore[arg-type]
                  if is_model else JsonOutputParser())
    return parsed_output(llm, parser, include_raw=include_raw)


def parsed_output(llm: Runnable[Any, Any], parser: Runnable[Any, Any], *, include_raw: bool
                  ) -> Runnable[Any, Any]:
    """`llm | parser`, or with `include_raw` a dict of the raw message, the parsed value and
    the parsing error, as LangChain's own models return it."""
    if not include_raw:
        return llm | parser
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser,
                                        parsing_error=lambda _: None)
    unparsed = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=llm) | parsed.with_fallbacks([unparsed],
                                                        exception_key="parsing_error")
