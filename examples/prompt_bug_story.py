"""A prompt bug, from a recorded run to a confirmed fix.

A support agent answers several questions in a row. For each one it looks up notes and builds
the prompt from them, but the code takes `notes[0]` (the first question's notes) where it
meant `notes[-1]`: the second question is answered with the first question's context.

1. The agent runs live and is recorded; a customer gets a wrong answer.
2. The recorded run replays offline (no model, no search API) and gives the same wrong answer:
   the bug is reproduced, exactly, as often as needed.
3. The fixed code is replayed against the recording: the replay stops at the first call that
   changed, with a `ReplayDivergence` (prompt_changed) whose diff shows the corrected notes.
4. Fork and continue: the replay serves the unchanged prefix and goes live from the changed
   call on, recording the fixed run; `agentreplay diff BUGGY FIXED` confirms that the one
   difference is the second prompt (and its answer).

    python examples/prompt_bug_story.py

Needs `pip install "agentreplay[embedded,langchain]"`; uses AGENTREPLAY_DSN if set, else the
embedded PostgreSQL.
"""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool

from agentreplay_core import ReplayDivergence, open_store
from agentreplay_langchain import ReplayChatModel, instrument, replay_tools

NOTES = {"office": "the Lyon office is open 8:30-17:00 on weekdays",
         "password": "passwords are reset at https://id.example.com/reset"}
QUESTIONS = ["When is the office open?", "How do I reset my password?"]
PROMPT = "Answer the customer from the notes.\nNotes: {notes}\nQuestion: {question}"


@tool
def search_notes(question: str) -> str:
    """The support notes for a question (a search API in real life)."""
    return next((text for key, text in NOTES.items() if key in question.lower()), "no notes")


class SupportModel(BaseChatModel):
    """Stands in for a hosted LLM: answers from the notes in its prompt, in words it samples
    (so two live runs never read the same)."""

    @property
    def _llm_type(self) -> str:
        return "support-model"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        notes = str(messages[-1].content).split("Notes: ")[1].split("\n")[0]
        opener = random.choice(["Sure!", "Happy to help:", "Good question:"])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(f"{opener} {notes}."))])


def buggy_agent(model: BaseChatModel, search: BaseTool) -> list[str]:
    notes: list[str] = []
    answers = []
    for question in QUESTIONS:
        notes.append(search.invoke(question))
        prompt = PROMPT.format(notes=notes[0], question=question)  # BUG: the first notes
        answers.append(str(model.invoke(prompt).content))
    return answers


def fixed_agent(model: BaseChatModel, search: BaseTool) -> list[str]:
    notes: list[str] = []
    answers = []
    for question in QUESTIONS:
        notes.append(search.invoke(question))
        prompt = PROMPT.format(notes=notes[-1], question=question)  # fixed: this question's
        answers.append(str(model.invoke(prompt).content))
    return answers


with open_store() as store:
    print("1. live, recorded:")
    with store.record(name="support-bot") as rec, instrument(rec):
        live = buggy_agent(SupportModel(), search_notes)
    buggy_run = str(rec.run_id)
    for question, answer in zip(QUESTIONS, live, strict=True):
        print(f"   {question} -> {answer}")
    assert "office" in live[1], "the second answer talks about the office: the bug"

    print("2. the recorded run, replayed offline with the same code:")
    with store.replay(buggy_run) as player:
        again = buggy_agent(ReplayChatModel(player=player), replay_tools(player, [search_notes])[0])
    assert again == live
    print(f"   same answers, same bug: {again[1]}")

    print("3. the fixed code, replayed against the recording:")
    try:
        with store.replay(buggy_run) as player:
            fixed_agent(ReplayChatModel(player=player), replay_tools(player, [search_notes])[0])
        raise AssertionError("the fix should change the second prompt")
    except ReplayDivergence as divergence:
        assert divergence.classification == "prompt_changed" and divergence.step == 4
        print(f"   ReplayDivergence at step {divergence.step} ({divergence.classification}):")
        print("   " + divergence.diff.replace("\n", "\n   "))

    print("4. fork and continue: replay the unchanged part, go live from the change:")
    with store.replay(buggy_run, on_divergence="live") as player:
        model = ReplayChatModel(player=player, live=SupportModel())
        fixed = fixed_agent(model, replay_tools(player, [search_notes])[0])
    assert player.fork is not None
    fixed_run = str(player.fork.run_id)
    assert fixed[0] == live[0] and "password" in fixed[1]
    print(f"   fixed run {fixed_run}: {fixed[1]}")

    # `agentreplay diff` compares the two runs step by step (same store: AGENTREPLAY_DSN, or
    # the embedded PostgreSQL). Exit code 1: the runs differ.
    diff = subprocess.run([sys.executable, "-m", "agentreplay_core", "diff", buggy_run, fixed_run],
                          capture_output=True, text=True)
    print(diff.stdout)
    assert diff.returncode == 1, diff.stderr
    assert "prompt_changed" in diff.stdout
    print("the fix changes the second prompt, and nothing else before it")
