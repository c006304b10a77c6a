"""A LlamaIndex agent recorded under other redaction rules than the replay's (an older
agentreplay in production, a laptop without its `fields=`) replays with the same key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.tools import FunctionTool

from agentreplay_core import Redactor
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import ToolCallingLLM
from tests.support.redaction_rules import first_word_rules

KEY = b"production and laptop share this key"
ASKED = 'why does DB_PASSWORD="correct horse battery staple" not let me in?'


def login_tools(ran: list[str]) -> list[FunctionTool]:
    """The agent's tool, which notes each user it is run for in `ran`."""
    def check_login(user: str) -> str:
        """Why a database user cannot log in."""
        ran.append(user)
        return f"{user}: password expired"
    return [FunctionTool.from_defaults(fn=check_login)]


@pytest.mark.parametrize("workflow", [False, True], ids=["streamed", "workflow"])
def test_an_agent_recorded_under_older_rules_replays_under_the_defaults(
        stores: Any, workflow: bool) -> None:
    # the older rules take the quoted passphrase's first word only, the defaults all of it:
    # every model request is redacted otherwise, and matches its recording as sent
    older = first_word_rules(KEY)
    ran: list[str] = []

    with stores(older).record(name="older rules") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), login_tools(ran), workflow=workflow,
                                           user_msg=ASKED))
    assert len(ran) == 1
    laptop = stores(Redactor(key=KEY))
    first = next(s for s in laptop.load_steps(rec.run_id) if s.kind == "llm")
    assert "horse battery staple" in str(first.input) and "correct" not in str(first.input)
    with laptop.replay(rec.run_id) as player:
        tools = replay_tools(player, login_tools(ran))
        again = asyncio.run(scenarios.agent(ReplayLLM(player), tools, workflow=workflow,
                                            user_msg=ASKED))
    assert again == live and len(ran) == 1


def test_without_the_key_it_replays_when_secrets_are_not_checked(stores: Any) -> None:
    ran: list[str] = []

    with stores(Redactor(key=KEY)).record(name="production key") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), login_tools(ran), workflow=True,
                                           user_msg=ASKED))
    laptop = stores(Redactor(key=b"a laptop's own key"))
    with pytest.raises(Exception) as caught, laptop.replay(rec.run_id) as player:
        asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(player, login_tools(ran)),
                                    workflow=True, user_msg=ASKED))
    assert "but for its secrets" in str(scenarios.divergence_in(caught.value))
    with laptop.replay(rec.run_id, check_secrets=False) as player:
        tools = replay_tools(player, login_tools(ran))
        again = asyncio.run(scenarios.agent(ReplayLLM(player), tools, workflow=True,
                                            user_msg=ASKED))
    assert again == live and len(ran) == 1
