"""No secret a LangChain agent handles is stored: not from its prompt, tool arguments, tool
results or model parameters, in no store, spool or export; and `serialized` (the model's whole
constructor payload, credentials included) is never stored at all."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool, tool
from pydantic import Field

from agentreplay_core import Store, open_store
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel, replay_tools
from tests.langchain.fakes import ScriptedChatModel, transcript
from tests.langchain.test_tool_loop import tool_loop
from tests.support.helper_process import wait_until_used
from tests.support.pgcluster import PgCluster
from tests.support.secret_leaks import (
    FakeSecret,
    every_place_stored,
    fake_secrets,
    leaks,
    schema_bytes,
)

FAKES = fake_secrets()
ALL_TEXT = " | ".join(f.in_text for f in FAKES)
BY_KIND = {f.kind: f for f in FAKES}
#: a value only the model's `serialized` payload holds: finding it means it was stored
SERIALIZED_ONLY = f"deployment-{secrets.token_hex(8)}"


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "langchain-test-key")


class CredentialedChatModel(ScriptedChatModel):
    """A provider integration: an API key, an Authorization header, extra request kwargs; and
    (like some integrations) its credentials among the parameters it reports."""

    api_key: str
    default_headers: dict[str, str] = Field(default_factory=dict)
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    deployment_note: str = ""

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return True  # `serialized` is then dumpd(model): every field, the key in plaintext

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "credentialed", "api_key": self.api_key,
                "default_headers": self.default_headers, "model_kwargs": self.model_kwargs}


def make_model() -> CredentialedChatModel:
    return CredentialedChatModel(
        plan=[[("fetch_config", {"service": "billing", "notes": ALL_TEXT})]],
        api_key=BY_KIND["openai"].value,
        default_headers={"Authorization": f"Bearer {BY_KIND['bearer'].value}"},
        model_kwargs={"extra_body": {"notes": ALL_TEXT}},
        deployment_note=SERIALIZED_ONLY)


def make_tools() -> list[BaseTool]:
    @tool
    def fetch_config(service: str, notes: str) -> str:
        """Read a service's configuration (credentials included, as real configs are)."""
        return f"config of {service}: {ALL_TEXT}"

    return [fetch_config]


def record_agent(store: Store) -> tuple[UUID, list[BaseMessage]]:
    with store.record(name="credentialed agent") as rec:
        messages = tool_loop(make_model(), make_tools(), f"set up billing; {ALL_TEXT}",
                             {"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0 and rec.stats.unencodable == 0
    assert rec.stats.steps == 3  # model, tool, model
    return rec.run_id, messages


def grep(blob: bytes, fakes: list[FakeSecret]) -> list[str]:
    found = leaks(blob, fakes)
    return [*found, "serialized"] if SERIALIZED_ONLY.encode() in blob else found


def test_no_secret_reaches_postgres_files_spool_or_export(
        store: Store, pg_dsn: str, pg_schema: str, private_cluster: PgCluster,
        tmp_path: Path) -> None:
    stored, plain = every_place_stored(lambda s: record_agent(s)[0], store, pg_dsn, pg_schema,
                                       private_cluster, tmp_path)
    assert grep(stored, FAKES) == []
    # without redaction every secret is there to find, but `serialized` still is not
    assert grep(plain, FAKES) == [f.kind for f in FAKES]


def test_the_run_replays_and_gives_the_secrets_back_when_asked(store: Store) -> None:
    run_id, live = record_agent(store)
    question = f"set up billing; {ALL_TEXT}"
    with store.replay(run_id) as player:  # requests holding secrets still match
        redacted = tool_loop(ReplayChatModel(player=player), replay_tools(player, make_tools()),
                             question)
    assert "<secret:" in str(redacted[-1].content)
    assert not leaks(str(transcript(redacted[1:])).encode(), FAKES)  # all but our question
    with store.replay(run_id, secrets=[f.value for f in FAKES]) as player:
        replayed = tool_loop(ReplayChatModel(player=player),
                             replay_tools(player, make_tools()), question)
    assert transcript(replayed) == transcript(live)


def test_with_the_helper_process_no_secret_is_stored_and_the_run_replays(
        pg_dsn: str, other_schema: str) -> None:
    """`prepare="process"`: the secrets are redacted in the helper process, with the same key
    (the run matches and restores as one recorded without it)."""
    with open_store(pg_dsn, schema=other_schema, prepare="process") as helped:
        helper = wait_until_used(helped)
        before = helper.prepared
        run_id, live = record_agent(helped)
        assert helper.prepared - before == 3 and helper.failure is None
        assert grep(schema_bytes(pg_dsn, other_schema), FAKES) == []
        with helped.replay(run_id, secrets=[f.value for f in FAKES]) as player:
            replayed = tool_loop(ReplayChatModel(player=player),
                                 replay_tools(player, make_tools()),
                                 f"set up billing; {ALL_TEXT}")
        assert transcript(replayed) == transcript(live)
