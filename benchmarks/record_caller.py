"""What recording costs the caller's thread, with the batched writer running behind it.

- LangChain: `GenericFakeChatModel.invoke` with no callbacks, with a no-op handler (the
  framework's own dispatch cost) and with `RecordingCallbackHandler`.
- LlamaIndex: `MockLLM.chat` with no handler, with no-op event and span handlers on the root
  dispatcher, and inside `instrument(recorder)`.
- The core: `Recorder.record` against the seed recorder's INSERT per step.
- Documented, no target: both frameworks with a model that first waits `MODEL_WAIT` on its
  "network" (the GIL free meanwhile), as a hosted model does: what recording adds to an
  agent's call when its steps come one at a time, not in a burst (blocks of a quarter of
  the calls: each call takes ten times as long).

Before each measured block the writer's backlog from the previous block is flushed, outside
the measurement, so that one variant's rows are never written on another's time. A block is
1,000 calls (0.1 to 0.4 s), long against the writer's batching, so that little of a block's
work is left for the writer after the block ends. Blocks of 200 calls left a visible part of
it outside the measurement: the LangChain handler measured 1.71x the no-op handler there and
2.04x in blocks of 1,000 (same code, same session). The "until durable" rows time the same
block plus the flush that makes its rows durable: none of the writer's work escapes them.
Every block records prompts and answers it has not recorded before (`_payloads.fresh`): the
same 1,000 calls again would find their text in the redactor's memo, as new text never does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import psycopg
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.runnables import RunnableConfig
from llama_index.core.llms import MockLLM

from agentreplay_core import Recorder, Store
from agentreplay_langchain import RecordingCallbackHandler
from agentreplay_llamaindex import instrument
from benchmarks._baselines import create_seed_table, seed_record
from benchmarks._context import Bench
from benchmarks._db import fresh_store, helped_store
from benchmarks._framework_baselines import (
    MODEL_WAIT,
    NoOpHandler,
    WaitingFakeChatModel,
    WaitingMockLLM,
    no_op_handlers,
)
from benchmarks._payloads import (
    ANSWER_CHARS,
    fresh,
    fresh_chat_steps,
    langchain_chat,
    llamaindex_chat,
)
from benchmarks._report import Target
from benchmarks._timing import Sample, interleave, per_unit, process_cpu, ratio

SCHEMA = "bench_caller"
HANDLER_LIMIT = 1.25
SEED_FACTOR = 20.0


#: the handler with the writer thread held until the measured block has ended: what the
#: calling thread itself spends, without the writer's work that the GIL puts on its clock
HELD = "RecordingCallbackHandler, writer held"
HELD_LI = "instrument(recorder), writer held"
#: the handler on a recorder whose `record` does nothing: the adapter's own bookkeeping
#: (run tree, request and answer dumped from LangChain's or LlamaIndex's objects), the floor
#: under any recorder, however fast
NOTHING = "RecordingCallbackHandler, nothing recorded"
NOTHING_LI = "instrument(recorder), nothing recorded"
DURABLE = "RecordingCallbackHandler, until durable"
DURABLE_LI = "instrument(recorder), until durable"
#: the same recording into a store opened with `prepare="process"`: a helper process
#: prepares the rows (redaction, canonical JSON, keys, deltas) instead of the writer thread
PROCESS = "RecordingCallbackHandler, prepare=process"
PROCESS_LI = "instrument(recorder), prepare=process"
PROCESS_DURABLE = "RecordingCallbackHandler, prepare=process, until durable"
PROCESS_DURABLE_LI = "instrument(recorder), prepare=process, until durable"
PROCESS_CORE = "Recorder.record, batched, prepare=process"
#: calls per measured block (see the module's docstring)
BLOCK = 1_000
#: a waiting model's block is this share of `BLOCK`: its calls take ten times as long
WAITING_SHARE = 4
WAITING = f"model waits {MODEL_WAIT * 1000:g} ms"


@contextmanager
def writer_held(store: Store) -> Iterator[None]:
    """The store's batched writer lingers until the next flush instead of 2 ms, so that its
    work on what is recorded meanwhile falls outside the measured block (a diagnosis, not
    a way of recording: the next block's flush writes the rows, outside the measurement)."""
    writer = store._batched
    if writer is None:
        raise RuntimeError("the store has no batched writer yet: record a step first")
    # a queue of a whole batch would otherwise have the recording thread make its own rows
    linger, max_batch = writer.linger, writer.max_batch
    writer.linger, writer.max_batch = 3600.0, writer.max_queue
    try:
        yield
    finally:
        writer.linger, writer.max_batch = linger, max_batch


def records_nothing(rec: Recorder) -> Recorder:
    """`rec`, whose `record` from now on returns at once (a diagnosis: see `NOTHING`)."""
    vars(rec)["record"] = lambda *args, **kwargs: None
    return rec


#: a block's calls: the function to call and the prompts to call it with, new each block
Workload = Callable[[], tuple[Callable[[Any], object], Sequence[Any]]]


def _block(rec: Recorder, store: Store, workload: Workload, how: str,
           attached: Callable[[], AbstractContextManager[Any]] = nullcontext,
           others: Sequence[Recorder] = (),
           ) -> Callable[[], float]:
    """One measured block: the workload's call on each of its prompts (made anew, before the
    clock starts: see `_payloads.fresh`), after the previous block's rows are written (also
    those of the `others`, recording into another store); `how` is "" (the calls), "held"
    (the writer held meanwhile) or "durable" (the calls and the flush that makes their rows
    durable)."""
    def run() -> float:
        call, prompts = workload()

        def calls_made() -> None:
            for prompt in prompts:
                call(prompt)
            if how == "durable" and not rec.flush(timeout=120):
                raise RuntimeError("the writer did not make the block durable")

        for recorder in (rec, *others):
            recorder.flush(timeout=120)
        with attached(), writer_held(store) if how == "held" else nullcontext():
            return per_unit(calls_made, len(prompts))
    return run


def _langchain(bench: Bench, store: Store, helped: Store) -> dict[str, Sample]:
    calls = bench.size(50, BLOCK)
    with store.record(name="langchain-caller") as rec, \
            helped.record(name="langchain-caller, prepare=process") as other, \
            store.record(name="langchain-caller, nothing recorded") as idle:
        handler: RunnableConfig = {"callbacks": [RecordingCallbackHandler(rec)]}
        bookkeeping: RunnableConfig = {
            "callbacks": [RecordingCallbackHandler(records_nothing(idle))]}
        process: RunnableConfig = {"callbacks": [RecordingCallbackHandler(other)]}
        no_op: RunnableConfig = {"callbacks": [NoOpHandler()]}
        configs: dict[str, tuple[RunnableConfig | None, str, Recorder, bool]] = {
            "no callbacks": (None, "", rec, False),
            "no-op handler": (no_op, "", rec, False),
            "RecordingCallbackHandler": (handler, "", rec, False),
            HELD: (handler, "held", rec, False),
            NOTHING: (bookkeeping, "", rec, False),
            DURABLE: (handler, "durable", rec, False),
            PROCESS: (process, "", other, False),
            PROCESS_DURABLE: (process, "durable", other, False),
            f"no-op handler, {WAITING}": (no_op, "", rec, True),
            f"RecordingCallbackHandler, {WAITING}": (handler, "", rec, True),
        }

        def block(config: RunnableConfig | None, how: str, into: Recorder, waits: bool
                  ) -> Callable[[], float]:
            model_class = WaitingFakeChatModel if waits else GenericFakeChatModel
            count = calls // WAITING_SHARE if waits else calls

            def workload() -> tuple[Callable[[Any], object], Sequence[Any]]:
                prompts, answers = langchain_chat(count, fresh(count))
                model = model_class(messages=iter(answers))
                return lambda p: model.invoke(p, config=config), prompts
            return _block(into, store, workload, how, others=(rec, other))

        return interleave({name: block(*c) for name, c in configs.items()}, bench.repeats)


def _llamaindex(bench: Bench, store: Store, helped: Store) -> dict[str, Sample]:
    calls = bench.size(50, BLOCK)
    llm = MockLLM(max_tokens=ANSWER_CHARS // 5)  # "text " repeated: the answer's size
    waiting = WaitingMockLLM(max_tokens=ANSWER_CHARS // 5)
    with store.record(name="llamaindex-caller") as rec, \
            helped.record(name="llamaindex-caller, prepare=process") as other, \
            store.record(name="llamaindex-caller, nothing recorded") as idle:
        records_nothing(idle)
        attach: dict[str, tuple[Callable[[], AbstractContextManager[Any]], str, Recorder,
                                MockLLM]] = {
            "no handler": (nullcontext, "", rec, llm),
            "no-op handlers": (no_op_handlers, "", rec, llm),
            "instrument(recorder)": (lambda: instrument(rec), "", rec, llm),
            HELD_LI: (lambda: instrument(rec), "held", rec, llm),
            NOTHING_LI: (lambda: instrument(idle), "", rec, llm),
            DURABLE_LI: (lambda: instrument(rec), "durable", rec, llm),
            PROCESS_LI: (lambda: instrument(other), "", other, llm),
            PROCESS_DURABLE_LI: (lambda: instrument(other), "durable", other, llm),
            f"no-op handlers, {WAITING}": (no_op_handlers, "", rec, waiting),
            f"instrument(recorder), {WAITING}": (lambda: instrument(rec), "", rec, waiting),
        }

        def workload_of(model: MockLLM) -> Workload:
            count = calls // WAITING_SHARE if model is waiting else calls
            return lambda: (model.chat, llamaindex_chat(count, fresh(count)))

        return interleave({name: _block(into, store, workload_of(model), how, attached,
                                        (rec, other))
                           for name, (attached, how, into, model) in attach.items()},
                          bench.repeats)


def _core(bench: Bench, store: Store, helped: Store) -> dict[str, Sample]:
    count = bench.size(200, 500)

    def recorded(rec: Recorder, steps: list[tuple[Any, Any]]) -> None:
        for request, response in steps:
            rec.record("llm", "chat_model", request, response)

    def agentreplay(into: Store, cpu: list[float]) -> Callable[[], float]:
        def run() -> float:
            # The caller's time is measured; sealing (the flush) is not. The CPU of every
            # thread of the process (and of the helper process) until the run is durable is
            # kept too: the work the recorder hands to the writer is not free, it only leaves
            # the agent's thread.
            steps = fresh_chat_steps(count)
            c0, h0 = time.process_time(), helper_cpu(into)
            with into.record(name="core-caller") as rec:
                caller = per_unit(lambda: recorded(rec, steps), count)
            cpu.append((time.process_time() - c0 + helper_cpu(into) - h0) / count)
            return caller
        return run

    cpu: list[float] = []
    helped_cpu: list[float] = []
    with psycopg.connect(bench.dsn, autocommit=True) as conn:
        create_seed_table(conn, SCHEMA)
        timed = interleave({"seed recorder (INSERT per step)":
                            lambda: seed_record(conn, SCHEMA, fresh_chat_steps(count)),
                            "Recorder.record, batched": agentreplay(store, cpu),
                            PROCESS_CORE: agentreplay(helped, helped_cpu)}, bench.repeats)
    timed["Recorder.record, batched: CPU of all threads until durable"] = Sample(tuple(cpu))
    timed[f"{PROCESS_CORE}: CPU of both processes until durable"] = Sample(tuple(helped_cpu))
    return timed


def _added(framework: str, samples: dict[str, Sample], baseline: str, recording: str
           ) -> Target:
    """What recording adds to a call whose model waits `MODEL_WAIT`, against what it adds
    to one that does not wait (documented). On a virtual machine the waits cost more than
    they seem to: each wake-up after an idle spell costs CPU (the agent's after its model's
    wait, the writer's for each step), and each step then goes in alone, in a transaction of
    its own (see RESULTS.md)."""
    waits = (samples[f"{recording}, {WAITING}"].median
             - samples[f"{baseline}, {WAITING}"].median)
    busy = samples[recording].median - samples[baseline].median
    return Target(f"{framework}, {WAITING}: what recording adds to a call (documented)",
                  waits * 1e6, None, " us",
                  detail=f"{busy * 1e6:.0f} us when the model does not wait")


def helper_cpu(store: Store) -> float:
    """CPU seconds the store's prepare helper process has used so far (0 without one)."""
    writer = store._batched
    pid = writer.helper.pid if writer is not None and writer.helper is not None else None
    return process_cpu(pid) if pid is not None else 0.0


def run(bench: Bench) -> list[Target]:
    report = bench.report
    report.heading("record_caller: caller-thread cost of recording",
                   "Chat steps of ~2 KB in / ~1 KB out into PostgreSQL, batched mode; time on "
                   "the calling thread while the writer thread works behind it.")
    with fresh_store(bench.dsn, SCHEMA) as store, \
            helped_store(bench.dsn, SCHEMA) as helped:
        lc = _langchain(bench, store, helped)
        li = _llamaindex(bench, store, helped)
        core = _core(bench, store, helped)
    report.timing("LangChain GenericFakeChatModel.invoke", lc, baseline="no-op handler",
                  per="call")
    report.timing("LlamaIndex MockLLM.chat", li, baseline="no-op handlers", per="call")
    seed, ours, helped_core, ours_cpu, helped_cpu = core.values()
    report.timing("Core: one recorded step", core, baseline="seed recorder (INSERT per step)")
    return [
        Target("LangChain: invoke with RecordingCallbackHandler vs no-op handler",
               ratio(lc["RecordingCallbackHandler"], lc["no-op handler"]), HANDLER_LIMIT),
        Target("LlamaIndex: chat inside instrument(recorder) vs no-op handlers",
               ratio(li["instrument(recorder)"], li["no-op handlers"]), HANDLER_LIMIT),
        Target("LangChain: the handler's own cost, writer held, vs no-op handler "
               "(documented)", ratio(lc[HELD], lc["no-op handler"]), None,
               detail="the calling thread's work alone; the rest of the target's ratio is "
                      "the writer thread's"),
        Target("LlamaIndex: the adapter's own cost, writer held, vs no-op handlers "
               "(documented)", ratio(li[HELD_LI], li["no-op handlers"]), None),
        Target("LangChain: the handler with nothing recorded vs no-op handler (documented)",
               ratio(lc[NOTHING], lc["no-op handler"]), None,
               detail="its bookkeeping alone, on a recorder whose record does nothing: the "
                      "floor under any recorder"),
        Target("LlamaIndex: the adapter with nothing recorded vs no-op handlers (documented)",
               ratio(li[NOTHING_LI], li["no-op handlers"]), None),
        Target("LangChain: invoke until durable (the block plus its flush) vs no-op handler "
               "(documented)", ratio(lc[DURABLE], lc["no-op handler"]), None,
               detail="all of the writer's work on the block's rows is inside the time"),
        Target("LlamaIndex: chat until durable vs no-op handlers (documented)",
               ratio(li[DURABLE_LI], li["no-op handlers"]), None),
        _added("LangChain", lc, "no-op handler", "RecordingCallbackHandler"),
        _added("LlamaIndex", li, "no-op handlers", "instrument(recorder)"),
        Target("Caller latency per step: seed recorder / agentreplay batched",
               ratio(seed, ours), SEED_FACTOR, higher_is_better=True,
               detail=f"{ours.median * 1e6:.0f} us vs {seed.median * 1e6:.0f} us"),
        Target("Recording CPU per step, all threads until durable (documented)",
               ours_cpu.median * 1e6, None, " us",
               detail="the caller's share and the writer thread's: redaction, canonical "
                      "JSON, hashing and the COPY rows"),
        Target('LangChain, prepare="process": invoke with RecordingCallbackHandler vs no-op '
               "handler", ratio(lc[PROCESS], lc["no-op handler"]), HANDLER_LIMIT,
               detail="a helper process prepares the rows, outside the agent's GIL"),
        Target('LlamaIndex, prepare="process": chat inside instrument(recorder) vs no-op '
               "handlers", ratio(li[PROCESS_LI], li["no-op handlers"]), HANDLER_LIMIT),
        Target('LangChain, prepare="process": invoke until durable vs no-op handler '
               "(documented)", ratio(lc[PROCESS_DURABLE], lc["no-op handler"]), None),
        Target('LlamaIndex, prepare="process": chat until durable vs no-op handlers '
               "(documented)", ratio(li[PROCESS_DURABLE_LI], li["no-op handlers"]), None),
        Target('Caller latency per step, prepare="process": seed recorder / agentreplay',
               ratio(seed, helped_core), SEED_FACTOR, higher_is_better=True,
               detail=f"{helped_core.median * 1e6:.0f} us vs {seed.median * 1e6:.0f} us"),
        Target('Recording CPU per step, prepare="process", both processes until durable '
               "(documented)", helped_cpu.median * 1e6, None, " us",
               detail="the helper process's CPU included: sending the steps there and back "
                      "costs CPU of its own"),
    ]
