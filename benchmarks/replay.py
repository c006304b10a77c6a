"""Replay cost: a replay model answering from a loaded run against the framework's own fake
model answering from a list, the same prompts, no callbacks; and, for diagnosis, the cost of
`Player.next` against the length of the run replayed, and of requests holding a secret (a
growing conversation; a long run of short calls) replayed under the rules they were recorded
with (matched by key) and under others (each request compared as sent with its recording).

Each repeat opens the replay anew (outside the measurement: loading is `load_verify`'s
subject) and asks for every recorded call once, as a replayed agent would.
"""

from __future__ import annotations

import functools
import itertools
import tempfile
from collections.abc import Callable
from typing import Any

from agentreplay_core import RedactionRule, Redactor, Store, open_store
from benchmarks._context import Bench
from benchmarks._db import fresh_store
from benchmarks._payloads import ANSWER_CHARS, chat_steps, langchain_chat, llamaindex_chat
from benchmarks._report import Target
from benchmarks._timing import Sample, interleave, per_unit, ratio

SCHEMA = "bench_replay"
LIMIT = 1.10


def _langchain(bench: Bench, store: Store) -> dict[str, Sample]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel

    prompts, answers = langchain_chat(bench.size(50, 200))
    with store.record(name="langchain-replay") as rec:
        live = GenericFakeChatModel(messages=iter(answers))
        for prompt in prompts:
            live.invoke(prompt, config={"callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id) as player:  # it must replay, or there is nothing to time
        replayed = [ReplayChatModel(player=player).invoke(p).content for p in prompts]
    if replayed != [a.content for a in answers]:
        raise RuntimeError(f"run {rec.run_id} did not replay the recorded answers")

    def fake() -> float:
        model = GenericFakeChatModel(messages=itertools.cycle(answers))
        return per_unit(lambda: [model.invoke(p) for p in prompts], len(prompts))

    def replay() -> float:
        with store.replay(rec.run_id) as player:
            model = ReplayChatModel(player=player)
            return per_unit(lambda: [model.invoke(p) for p in prompts], len(prompts))

    return interleave({"GenericFakeChatModel.invoke": fake,
                       "ReplayChatModel.invoke": replay}, bench.repeats)


def _llamaindex(bench: Bench, store: Store) -> dict[str, Sample]:
    from llama_index.core.llms import MockLLM

    from agentreplay_llamaindex import ReplayLLM, instrument

    prompts = llamaindex_chat(bench.size(50, 200))
    llm = MockLLM(max_tokens=ANSWER_CHARS // 5)
    with store.record(name="llamaindex-replay") as rec, instrument(rec):
        recorded = [llm.chat(p).message.content for p in prompts]
    with store.replay(rec.run_id) as player:
        replayed = [ReplayLLM(player=player).chat(p).message.content for p in prompts]
    if replayed != recorded:
        raise RuntimeError(f"run {rec.run_id} did not replay the recorded answers")

    def timed(make: Callable[[], MockLLM | ReplayLLM]) -> float:
        model = make()
        return per_unit(lambda: [model.chat(p) for p in prompts], len(prompts))

    def replay() -> float:
        with store.replay(rec.run_id) as player:
            return timed(lambda: ReplayLLM(player=player))

    return interleave({"MockLLM.chat": lambda: timed(lambda: llm),
                       "ReplayLLM.chat": replay}, bench.repeats)


def _player_scaling(bench: Bench, store: Store, lengths: tuple[int, ...]) -> dict[str, Sample]:
    """Seconds per `player.next` when replaying a whole run of each length."""
    steps = chat_steps(lengths[-1])
    run_ids = {}
    for n in lengths:
        with store.record(name=f"replay-{n}") as rec:
            for request, response in steps[:n]:
                rec.record("llm", "chat_model", request, response)
        run_ids[n] = rec.run_id

    def replay(n: int) -> float:
        with store.replay(run_ids[n]) as player:
            return per_unit(lambda: [player.next("llm", "chat_model", request)
                                     for request, _ in steps[:n]], n)

    return interleave({f"{n:,} steps": functools.partial(replay, n) for n in lengths},
                      bench.size(1, 2), warmup=False)


def _conversation(turns: int) -> list[dict[str, Any]]:
    """The requests of a conversation that grows by a 400-character answer a turn, its first
    message holding a quoted passphrase."""
    history = [{"role": "user", "content": 'DB_PASSWORD="correct horse battery staple"'}]
    requests = []
    for turn in range(turns):
        history = [*history, {"role": "assistant", "content": f'turn {turn}: "' + "a" * 400}]
        requests.append({"messages": history})
    return requests


def _many_calls(calls: int) -> list[dict[str, Any]]:
    """The requests of a long run of short calls, each with the passphrase in its system
    prompt."""
    return [{"system": 'DB_PASSWORD="correct horse battery staple"', "question": f"q {n}"}
            for n in range(calls)]


def _other_rules(bench: Bench, requests: list[dict[str, Any]]) -> dict[str, Sample]:
    """Seconds per `player.next` of `requests`, recorded by rules that take a quoted
    passphrase's first word only: replayed under those rules, and under the defaults (which
    take it whole, so no request's key is found)."""
    key = b"benchmark redaction key"
    older = Redactor(key=key, defaults=False, rules=[RedactionRule(
        "assignment", pattern=r"""(?i:password)["']?\s*[:=]\s*["']?(?P<secret>[^\s"'<>]{6,})""")])
    with tempfile.TemporaryDirectory() as folder:
        url = f"file:{folder}/runs"
        with open_store(url, redaction=older) as recording, recording.record() as rec:
            for request in requests:
                rec.record("llm", "chat_model", request, "ok")

        def replay(redactor: Redactor) -> float:
            with open_store(url, redaction=redactor) as store, store.replay(rec.run_id) as p:
                return per_unit(lambda: [p.next("llm", "chat_model", request)
                                         for request in requests], len(requests))

        return interleave({"same rules (matched by key)": lambda: replay(older),
                           "other rules (compared as sent)": lambda: replay(Redactor(key=key))},
                          bench.repeats)


def run(bench: Bench) -> list[Target]:
    report = bench.report
    report.heading("replay: serving recorded chat calls",
                   "The recorded run is loaded and verified before each repeat, outside the "
                   "measurement.")
    with fresh_store(bench.dsn, SCHEMA) as store:
        lc = _langchain(bench, store)
        li = _llamaindex(bench, store)
        lengths = (100, 1_000) if bench.quick else (100, 1_000, 10_000)
        player = _player_scaling(bench, store, lengths)
    turns, calls = bench.size(50, 100), bench.size(1_000, 5_000)
    conversation = _other_rules(bench, _conversation(turns))
    many = _other_rules(bench, _many_calls(calls))
    report.timing("LangChain", lc, baseline="GenericFakeChatModel.invoke", per="call")
    report.timing("LlamaIndex (no target; for comparison)", li, baseline="MockLLM.chat",
                  per="call")
    report.timing(f"A {turns}-turn conversation holding a secret, replayed under other "
                  "redaction rules than recorded (no target; for diagnosis)", conversation,
                  baseline="same rules (matched by key)", per="call")
    report.timing(f"{calls:,} calls each holding a secret, replayed under other redaction "
                  "rules than recorded (no target; for diagnosis)", many,
                  baseline="same rules (matched by key)", per="call")
    first, last = f"{lengths[0]:,} steps", f"{lengths[-1]:,} steps"
    report.timing("Player.next per call against run length (no target; for diagnosis)",
                  player, baseline=first, per="call")
    return [Target("Replay: ReplayChatModel.invoke vs GenericFakeChatModel.invoke",
                   ratio(lc["ReplayChatModel.invoke"], lc["GenericFakeChatModel.invoke"]),
                   LIMIT),
            Target(f"Replay: Player.next per call, {lengths[-1]:,}-step run vs "
                   f"{lengths[0]:,}-step run (documented)",
                   ratio(player[last], player[first]), None,
                   detail=f"{player[last].median * 1e6:,.0f} us vs "
                          f"{player[first].median * 1e6:,.0f} us per call")]
