"""No secret a LlamaIndex agent handles is stored: not from its prompt, tool arguments, tool
results or the model's request kwargs, in no store, spool or export; and the model's
`model_dict` (its `to_dict()`, API key included) is never stored at all."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from pydantic import Field

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import ToolCallingLLM, _last_turn, sample
from tests.support.pgcluster import PgCluster
from tests.support.secret_leaks import FakeSecret, every_place_stored, fake_secrets, leaks

FAKES = fake_secrets()
ALL_TEXT = " | ".join(f.in_text for f in FAKES)
BY_KIND = {f.kind: f for f in FAKES}
QUESTION = f"set up billing; {ALL_TEXT}"
#: a value only the model's `model_dict` holds: finding it means the dict was stored
MODEL_DICT_ONLY = f"deployment-{secrets.token_hex(8)}"


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "llamaindex-test-key")


class CredentialedLLM(ToolCallingLLM):
    """A provider integration: an API key and headers on the model, an Authorization header
    among the kwargs of each call; it asks for `fetch_config`, then quotes its result."""

    api_key: str = ""
    default_headers: dict[str, str] = Field(default_factory=dict)
    deployment_note: str = ""

    def _reply(self, messages: Sequence[ChatMessage], tools: list[Any]) -> ChatMessage:
        results = _last_turn(messages)
        if results or not tools:
            quoted = " / ".join(str(m.content) for m in results)
            return ChatMessage(role=MessageRole.ASSISTANT, content=f"done {sample()}: {quoted}")
        call = {"id": f"call_{sample()}", "name": "fetch_config",
                "arguments": json.dumps({"service": "billing", "notes": ALL_TEXT})}
        return ChatMessage(role=MessageRole.ASSISTANT, content="",
                           additional_kwargs={"tool_calls": [call]})

    def _prepare_chat_with_tools(self, tools: Sequence[BaseTool], *args: Any,
                                 **kwargs: Any) -> dict[str, Any]:
        prepared = super()._prepare_chat_with_tools(tools, *args, **kwargs)
        prepared["extra_headers"] = {"Authorization": f"Bearer {BY_KIND['bearer'].value}"}
        return prepared


def make_llm() -> CredentialedLLM:
    return CredentialedLLM(api_key=BY_KIND["openai"].value,
                           default_headers={"X-Api-Key": BY_KIND["anthropic"].value},
                           deployment_note=MODEL_DICT_ONLY)


def make_tools() -> list[BaseTool]:
    def fetch_config(service: str, notes: str) -> str:
        """Read a service's configuration (credentials included, as real configs are)."""
        return f"config of {service}: {ALL_TEXT}"

    return [FunctionTool.from_defaults(fn=fetch_config)]


def record_agent(store: Store, question: str = QUESTION) -> tuple[UUID, str]:
    with store.record(name="credentialed agent") as rec, instrument(rec):
        out = asyncio.run(scenarios.agent(make_llm(), make_tools(), workflow=False,
                                          user_msg=question))
    assert rec.stats.internal_errors == 0 and rec.stats.unencodable == 0
    assert rec.stats.steps == 3  # model, tool, model
    return rec.run_id, str(out["text"])


def grep(blob: bytes, fakes: list[FakeSecret]) -> list[str]:
    found = leaks(blob, fakes)
    return [*found, "model_dict"] if MODEL_DICT_ONLY.encode() in blob else found


def test_no_secret_reaches_postgres_files_spool_or_export(
        li_store: Store, pg_dsn: str, pg_schema: str, private_cluster: PgCluster,
        tmp_path: Path) -> None:
    stored, plain = every_place_stored(lambda s: record_agent(s)[0], li_store, pg_dsn, pg_schema,
                                       private_cluster, tmp_path)
    assert grep(stored, FAKES) == []
    # without redaction every secret is there to find, but `model_dict` still is not
    assert grep(plain, FAKES) == [f.kind for f in FAKES]


def test_the_run_replays_and_gives_the_secrets_back_when_asked(li_store: Store) -> None:
    run_id, live = record_agent(li_store)
    with li_store.replay(run_id) as player:  # requests holding secrets still match
        redacted = asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(
            player, make_tools()), workflow=False, user_msg=QUESTION))
    assert "<secret:" in str(redacted["text"])
    assert not leaks(str(redacted["text"]).encode(), FAKES)
    with li_store.replay(run_id, secrets=[f.value for f in FAKES]) as player:
        replayed = asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(
            player, make_tools()), workflow=False, user_msg=QUESTION))
    assert replayed["text"] == live


def test_secrets_only_in_a_tool_result_replay_as_placeholders_and_still_match(
        li_store: Store) -> None:
    # the second model call holds the tool's secrets: live while recording, placeholders in
    # replay; its match key must be the same both times
    run_id, live = record_agent(li_store, "set up billing")
    with li_store.replay(run_id) as player:
        replayed = asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(
            player, make_tools()), workflow=False, user_msg="set up billing"))
    assert "<secret:" in replayed["text"] and not leaks(replayed["text"].encode(), FAKES)
    assert replayed["text"].split(":", 1)[0] == live.split(":", 1)[0]  # "done <sample>"
