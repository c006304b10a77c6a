"""Jobs LlamaIndex runs in parallel through `run_jobs` (the metadata extractors, with their
default progress bar) sending equal requests get, in replay, the answers recorded for them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any

import pytest
from llama_index.core import Document, Settings, async_utils
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.extractors import (
    KeywordExtractor,
    QuestionsAnsweredExtractor,
    TitleExtractor,
)
from llama_index.core.extractors.interface import BaseExtractor
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import LLM, CustomLLM, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode
from pydantic import PrivateAttr

from agentreplay_core import Store, open_store
from agentreplay_llamaindex import ReplayLLM, instrument

#: the same boilerplate page in several documents: equal nodes, equal prompts
FOOTER = "Confidential. Do not distribute. Page footer."
NODES = 8


class CountingLLM(CustomLLM):
    """Answers every prompt with the number of the call: equal prompts, other answers."""

    _calls: Iterator[int] = PrivateAttr(default_factory=itertools.count)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="counting-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return CompletionResponse(text=f"answer {next(self._calls)}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        raise NotImplementedError


@pytest.fixture
def store() -> Iterator[Store]:
    previous = Settings._llm  # the extractors' node parser must not need a real model
    Settings.llm = MockLLM()
    try:
        yield open_store("memory:")
    finally:
        Settings._llm = previous


@pytest.fixture
def start_order_not_job_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tqdm_asyncio.gather` starts its jobs in the order of a set (address dependent): one
    gather in one order, the next in another. Here the first starts them in reverse job
    order, the next in job order, and so on, so that a recording and its replay depending on
    it differ every time."""
    original = asyncio.as_completed
    reverse = itertools.cycle([True, False])

    def set_order(fs: Iterable[Any], **kwargs: Any) -> Any:
        given = list(fs)
        tasks = [asyncio.ensure_future(f) for f in (given[::-1] if next(reverse) else given)]
        return original(tasks, **kwargs)

    monkeypatch.setattr(asyncio, "as_completed", set_order)


Extract = Callable[[LLM], BaseExtractor]

EXTRACTORS: dict[str, Extract] = {
    "questions": lambda llm: QuestionsAnsweredExtractor(llm=llm, questions=1),
    "title": lambda llm: TitleExtractor(llm=llm, nodes=1),
    "keywords": lambda llm: KeywordExtractor(llm=llm, keywords=1),
}


def extracted(extractor: BaseExtractor) -> list[dict[str, Any]]:
    docs = [Document(text=FOOTER, id_=f"doc-{i}") for i in range(NODES)]
    nodes: Sequence[BaseNode] = IngestionPipeline(
        transformations=[SentenceSplitter(), extractor]).run(documents=docs)
    return [node.metadata for node in nodes]


def record_and_replay(store: Store, extract: Extract
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with store.record(name="extract") as rec, instrument(rec):
        live = extracted(extract(CountingLLM()))
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = extracted(extract(ReplayLLM(player=player)))
    return live, replayed


@pytest.mark.usefixtures("start_order_not_job_order")
@pytest.mark.parametrize("kind", sorted(EXTRACTORS))
def test_equal_nodes_get_their_own_recorded_metadata_in_replay(store: Store, kind: str
                                                               ) -> None:
    live, replayed = record_and_replay(store, EXTRACTORS[kind])
    assert len({str(m) for m in live}) == NODES, "each node must have had its own answer"
    assert replayed == live


def test_equal_nodes_keep_their_metadata_with_the_real_progress_bar_order(store: Store
                                                                         ) -> None:
    # the real set order of tqdm's gather: several rounds, each a new set of addresses
    for _ in range(3):
        live, replayed = record_and_replay(store, EXTRACTORS["questions"])
        assert replayed == live


@pytest.mark.usefixtures("start_order_not_job_order")
def test_workers_are_recorded_at_their_job_index(store: Store) -> None:
    llm = CountingLLM()

    async def ask() -> list[str]:
        jobs: list[Coroutine[Any, Any, CompletionResponse]] = [
            llm.acomplete(FOOTER) for _ in range(NODES)]
        responses = await async_utils.run_jobs(jobs, show_progress=True, workers=2)
        return [r.text for r in responses]

    with store.record(name="jobs") as rec, instrument(rec):
        answers = asyncio.run(ask())
    steps = {s.path: s.output for s in store.load_steps(rec.run_id)}
    by_worker = {path.split("/")[1]: str(out) for path, out in steps.items()}
    for index, answer in enumerate(answers):
        assert answer in by_worker[f"run_jobs.<locals>.worker#{index}"]


def test_run_jobs_runs_unchanged_outside_a_recording() -> None:
    async def job(n: int) -> int:
        return n

    async def run() -> list[int]:
        return list(await async_utils.run_jobs([job(n) for n in range(4)], show_progress=True))

    assert asyncio.run(run()) == [0, 1, 2, 3]
