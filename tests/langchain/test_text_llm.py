"""Text-completion LLMs: recorded through on_llm_start, replayed with ReplayLLM."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate

from agentreplay_core import ReplayDivergence, Store
from agentreplay_langchain import AbandonedStreamReplayed, RecordingCallbackHandler, ReplayLLM
from tests.langchain.fakes import ScriptedLLM

PROMPTS: list[Any] = ["the sky is", "roses are", "the answer is", "once upon a time"]


class Tokens(BaseCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        self.seen.append((token, chunk.generation_info if chunk is not None else None))


class AsyncTokens(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        self.seen.append((token, chunk.generation_info if chunk is not None else None))


def test_invoke_in_a_chain_replays_the_recorded_completion(store: Store) -> None:
    def chain(llm: Any) -> Any:
        return PromptTemplate.from_template("Complete: {text}") | llm | StrOutputParser()

    live_llm = ScriptedLLM()
    with store.record(name="llm-invoke") as rec:
        live = chain(live_llm).invoke({"text": "the sky is"},
                                      config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    assert chain(ScriptedLLM()).invoke({"text": "the sky is"}) != live
    with store.replay(rec.run_id) as player:
        replayed = chain(ReplayLLM(player=player)).invoke({"text": "the sky is"})
    assert replayed == live
    assert live_llm.calls == 1


def test_batch_replays_each_prompt_its_own_completion(store: Store) -> None:
    with store.record(name="llm-batch") as rec:
        live = ScriptedLLM().batch(PROMPTS, config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert len(store.load_steps(rec.run_id)) == len(PROMPTS)
    with store.replay(rec.run_id) as player:
        # asked in another order: each prompt still gets its own answer
        replayed = ReplayLLM(player=player).batch(PROMPTS[::-1])
    assert replayed == live[::-1]
    assert all(prompt in text for prompt, text in zip(PROMPTS, live, strict=True))


def test_stream_replays_the_chunks_and_token_callbacks(store: Store) -> None:
    live_tokens = Tokens()
    with store.record(name="llm-stream") as rec:
        live = list(ScriptedLLM().stream("roses are", config={
            "callbacks": [RecordingCallbackHandler(rec), live_tokens]}))
    assert len(live) > 3 and all(info["seed"] for _, info in live_tokens.seen)
    replay_tokens = Tokens()
    with store.replay(rec.run_id) as player:
        replayed = list(ReplayLLM(player=player).stream("roses are",
                                                        config={"callbacks": [replay_tokens]}))
    assert replayed == live
    assert replay_tokens.seen == live_tokens.seen


def test_streamed_completion_invoked_returns_the_whole_text_and_tokens(store: Store) -> None:
    live_tokens = Tokens()
    with store.record(name="llm-stream-invoke") as rec:
        live = "".join(ScriptedLLM().stream("roses are", config={
            "callbacks": [RecordingCallbackHandler(rec), live_tokens]}))
    replay_tokens = Tokens()
    with store.replay(rec.run_id) as player:
        replayed = ReplayLLM(player=player).invoke("roses are",
                                                   config={"callbacks": [replay_tokens]})
    assert replayed == live
    assert replay_tokens.seen == live_tokens.seen


def test_async_invoke_batch_and_stream(store: Store) -> None:
    async def run(llm: Any, tokens: AsyncTokens, callbacks: list[Any]
                  ) -> tuple[str, list[str], list[str]]:
        # (an empty callbacks list trips BaseLLM.agenerate on both lines: pass none instead)
        config: Any = {"callbacks": callbacks} if callbacks else {}
        one = await llm.ainvoke("the answer is", config=config)
        many = await llm.abatch(PROMPTS[:2], config=config)
        chunks = [c async for c in llm.astream("once upon a time",
                                               config={"callbacks": [*callbacks, tokens]})]
        return one, many, chunks

    live_tokens = AsyncTokens()
    with store.record(name="llm-async") as rec:
        live = asyncio.run(run(ScriptedLLM(), live_tokens, [RecordingCallbackHandler(rec)]))
    replay_tokens = AsyncTokens()
    with store.replay(rec.run_id) as player:
        replayed = asyncio.run(run(ReplayLLM(player=player), replay_tokens, []))
    assert replayed == live
    assert replay_tokens.seen == live_tokens.seen and len(live_tokens.seen) > 3


def test_error_mid_stream_replays_the_chunks_then_the_error(store: Store) -> None:
    def read(llm: Any, callbacks: list[Any]) -> tuple[list[str], BaseException]:
        taken: list[str] = []
        try:
            for chunk in llm.stream("the sky is", config={"callbacks": callbacks}):
                taken.append(chunk)
        except Exception as exc:
            return taken, exc
        raise AssertionError("the stream did not fail")

    with store.record(name="llm-stream-error") as rec:
        live, live_error = read(ScriptedLLM(fail_after=3), [RecordingCallbackHandler(rec)])
    assert len(live) == 3
    with store.replay(rec.run_id) as player:
        replayed, error = read(ReplayLLM(player=player), [])
    assert replayed == live
    assert type(error) is TimeoutError and str(error) == str(live_error)


def test_a_changed_prompt_is_a_divergence(store: Store) -> None:
    with store.record(name="llm-diverge") as rec:
        ScriptedLLM().invoke("the sky is", config={"callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id, allow_unused=True) as player, \
            pytest.raises(ReplayDivergence) as caught:
        ReplayLLM(player=player).invoke("the sea is")
    assert caught.value.classification == "prompt_changed"


def test_abandoned_stream_replays_up_to_where_the_consumer_stopped(store: Store) -> None:
    def read(llm: Any, count: int, callbacks: list[Any]) -> list[str]:
        taken: list[str] = []
        for chunk in llm.stream("roses are", config={"callbacks": callbacks}):
            taken.append(chunk)
            if len(taken) == count:
                break
        return taken

    with store.record(name="llm-abandoned") as rec:
        live = read(ScriptedLLM(), 2, [RecordingCallbackHandler(rec)])
    with store.replay(rec.run_id) as player:
        assert read(ReplayLLM(player=player), 2, []) == live
    with store.replay(rec.run_id) as player, pytest.raises(AbandonedStreamReplayed):
        read(ReplayLLM(player=player), 5, [])


@pytest.mark.parametrize("mode", ["invoke", "stream", "ainvoke", "astream"])
def test_a_changed_prompt_goes_live_in_a_fork_that_replays(store: Store, mode: str) -> None:
    def ask(llm: Any, prompt: str, tokens: Tokens) -> Any:
        config: Any = {"callbacks": [tokens]}
        if mode == "invoke":
            return llm.invoke(prompt, config=config)
        if mode == "stream":
            return list(llm.stream(prompt, config=config))

        async def go() -> Any:
            if mode == "ainvoke":
                return await llm.ainvoke(prompt, config=config)
            return [chunk async for chunk in llm.astream(prompt, config=config)]
        return asyncio.run(go())

    with store.record(name="llm-fork") as rec:
        recorded = ScriptedLLM().invoke("the sky is",
                                        config={"callbacks": [RecordingCallbackHandler(rec)]})
    live_llm = ScriptedLLM()
    with store.replay(rec.run_id, on_divergence="live") as player:
        llm = ReplayLLM(player=player, live=live_llm)
        served = ask(llm, "the sky is", Tokens())  # as recorded: served
        live = ask(llm, "the sea is", live_tokens := Tokens())  # a new prompt: live
        assert player.fork is not None
        fork_id = player.fork.run_id
    assert (served if mode in ("invoke", "ainvoke") else "".join(served)) == recorded
    assert live_llm.calls == 1 and "of the sea is" in "".join(live)
    if mode in ("stream", "astream"):  # the live tokens reached the caller's handler
        assert "".join(t for t, _ in live_tokens.seen) == "".join(live)
    replay_tokens = Tokens()
    with store.replay(fork_id) as player:
        llm = ReplayLLM(player=player)
        ask(llm, "the sky is", Tokens())
        assert ask(llm, "the sea is", replay_tokens) == live
    assert [t for t, _ in replay_tokens.seen] == [t for t, _ in live_tokens.seen]
    assert live_llm.calls == 1


def test_without_a_live_llm_a_changed_prompt_still_raises(store: Store) -> None:
    with store.record(name="llm-strict") as rec:
        ScriptedLLM().invoke("the sky is", config={"callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player, \
            pytest.raises(ReplayDivergence):
        ReplayLLM(player=player).invoke("the sea is")
