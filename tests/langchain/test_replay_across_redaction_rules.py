"""An agent recorded under other redaction rules than the replay's (an older agentreplay in
production, a laptop without its `fields=`) replays, provided the redaction key is the same."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from agentreplay_core import Redactor, ReplayDivergence
from agentreplay_langchain import RecordingCallbackHandler, instrument
from tests.langchain.fakes import Counter, ScriptedChatModel, assert_offline, transcript
from tests.support.redaction_rules import first_word_rules

agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
from agentreplay_langchain import ReplayMiddleware  # noqa: E402  (needs langchain 1.x)

KEY = b"production and laptop share this key"
#: the user pastes a config line: its quoted passphrase is redacted otherwise by each rule set
ASKED = 'why does DB_PASSWORD="correct horse battery staple" not let me in?'
#: rules that take the passphrase's first word only: every model request of the run is
#: redacted otherwise by the defaults
OLDER = first_word_rules(KEY)


def agent_of(counter: Counter, middleware: list[Any]) -> Any:
    @tool
    def check_login(user: str) -> str:
        """Why a database user cannot log in."""
        counter.hit("check_login")
        return f"{user}: password expired"

    model = ScriptedChatModel(plan=[[("check_login", {"user": "ops"})]])
    return agents.create_agent(model, [check_login], middleware=middleware)


def test_an_agent_recorded_under_older_rules_replays_under_the_defaults(stores: Any) -> None:
    with stores(OLDER).record(name="older rules", entropy=True) as rec:
        live = agent_of(Counter(), []).invoke(
            {"messages": [HumanMessage(ASKED)]},
            config={"callbacks": [RecordingCallbackHandler(rec)]})["messages"]
    laptop = stores(Redactor(key=KEY))
    first = next(s for s in laptop.load_steps(rec.run_id) if s.kind == "llm")
    assert "horse battery staple" in str(first.input) and "correct" not in str(first.input)
    counter = Counter()
    with laptop.replay(rec.run_id) as player, instrument(player):
        assert_offline()
        replayed = agent_of(counter, [ReplayMiddleware(player)]).invoke(
            {"messages": [HumanMessage(ASKED)]})["messages"]
    # the answer quoted the question: it replays as stored, redacted by the older rules
    assert transcript(replayed)[:-1] == transcript(live)[:-1]
    assert replayed[-1].content == OLDER.redact(live[-1].content) != live[-1].content
    assert counter.total == 0


def test_another_key_diverges_at_the_first_model_call_naming_its_step(stores: Any) -> None:
    with stores(Redactor(key=KEY)).record(name="production key") as rec:
        agent_of(Counter(), []).invoke({"messages": [HumanMessage(ASKED)]},
                                       config={"callbacks": [RecordingCallbackHandler(rec)]})
    with pytest.raises(ReplayDivergence) as err, \
            stores(Redactor(key=b"a laptop's own key")).replay(rec.run_id) as player, \
            instrument(player):
        agent_of(Counter(), [ReplayMiddleware(player)]).invoke(
            {"messages": [HumanMessage(ASKED)]})
    first = min(s.step for s in player.steps if s.kind == "llm")
    assert f"it is the request recorded at step {first} but for its secrets" in str(err.value)
    assert "horse" not in str(err.value)


def test_without_the_key_it_replays_when_secrets_are_not_checked(stores: Any) -> None:
    with stores(Redactor(key=KEY)).record(name="production key", entropy=True) as rec:
        live = agent_of(Counter(), []).invoke(
            {"messages": [HumanMessage(ASKED)]},
            config={"callbacks": [RecordingCallbackHandler(rec)]})["messages"]
    laptop = stores(Redactor(key=b"a laptop's own key"))
    counter = Counter()
    with laptop.replay(rec.run_id, check_secrets=False) as player, instrument(player):
        assert_offline()
        replayed = agent_of(counter, [ReplayMiddleware(player)]).invoke(
            {"messages": [HumanMessage(ASKED)]})["messages"]
    # the question is the user's own; the answer that quoted it comes back as stored
    assert transcript(replayed)[:-1] == transcript(live)[:-1]
    assert replayed[-1].content == Redactor(key=KEY).redact(live[-1].content)
    assert counter.total == 0
