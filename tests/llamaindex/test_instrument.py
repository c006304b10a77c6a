"""Attaching and detaching, the module's usage example, imports and version claims."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from llama_index_instrumentation import get_dispatcher

import agentreplay_llamaindex
from agentreplay_core import Store, decode, open_store
from agentreplay_llamaindex import SUPPORTED_VERSIONS, Instrumentation, instrument
from agentreplay_llamaindex._responses import response_from_json
from tests.llamaindex.models import SampledLLM

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def _in_thread(work: Callable[[], T]) -> T:
    """`work()` in a fresh thread, which starts with an empty context."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(work).result(timeout=60)


def test_module_usage_example_runs() -> None:
    result = doctest.testmod(agentreplay_llamaindex)
    assert result.attempted >= 5 and result.failed == 0


def test_instrument_attaches_once_and_detaches(li_store: Store) -> None:
    root = get_dispatcher()
    before = (list(root.event_handlers), list(root.span_handlers))
    with li_store.record(name="a") as rec:
        handle = instrument(rec)
        assert instrument(rec) is handle  # the same recorder: never attached twice
        assert len(root.event_handlers) == len(before[0]) + 1
        assert len(root.span_handlers) == len(before[1]) + 1
        other = open_store("memory:")
        with other.record(name="b") as rec_b, pytest.raises(RuntimeError, match=str(rec.run_id)):
            instrument(rec_b)
        handle.close()
        handle.close()  # idempotent
    assert (root.event_handlers, root.span_handlers) == before


def test_import_without_llama_index_names_the_extra() -> None:
    code = ("import sys\n"
            "sys.modules['llama_index'] = sys.modules['llama_index.core'] = None\n"
            "import agentreplay_llamaindex")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    assert result.returncode != 0
    assert 'pip install "agentreplay[llamaindex]"' in result.stderr


def test_supported_versions_match_the_pyproject_extra() -> None:
    # read as text: tomllib is not in Python 3.10's standard library
    text = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r'^llamaindex = \["([^"]+)"\]', text, re.MULTILINE)
    assert extra is not None
    assert extra.group(1) == f"llama-index-core{SUPPORTED_VERSIONS}"


def test_version_check_knows_the_supported_lines() -> None:
    from agentreplay_llamaindex._compat import installed_version, is_supported

    assert is_supported(installed_version())  # the lines CI runs are the ones we claim
    assert [is_supported(v) for v in ("0.11.23", "0.12.0", "0.14.99", "0.15.0", "1.0")] \
        == [False, True, True, False, False]


def test_a_handle_left_attached_after_its_run_is_replaced_by_the_next_run() -> None:
    store = open_store("memory:")
    with store.record(name="first") as first:
        forgotten = instrument(first)  # never closed by the user
    with store.record(name="second") as second, instrument(second) as handle:
        assert forgotten.closed and not handle.closed
    assert handle.closed


def test_instrument_player_tracks_spans_only_and_detaches(li_store: Store) -> None:
    root = get_dispatcher()
    before = (list(root.event_handlers), list(root.span_handlers))
    with li_store.record(name="a") as rec:
        pass
    with li_store.replay(rec.run_id) as player:
        with instrument(player) as handle:
            assert instrument(player) is handle
            assert handle.recorder is None and handle.tree is not None  # tracks, records not
            assert len(root.span_handlers) == len(before[1]) + 1
            with open_store("memory:").record(name="b") as other, \
                    pytest.raises(RuntimeError, match=f"replay of run {rec.run_id}"):
                instrument(other)
        assert (root.event_handlers, root.span_handlers) == before
    with pytest.raises(TypeError, match="Recorder or a Player"):
        instrument("not a run")  # type: ignore[arg-type]


def test_calls_outside_the_instrumented_context_are_not_recorded(li_store: Store) -> None:
    root = get_dispatcher()
    before = (list(root.event_handlers), list(root.span_handlers))
    with li_store.record(name="mine") as rec, instrument(rec) as handle:
        # a thread of the host's own (no context copied) is another request, not this one
        elsewhere = _in_thread(lambda: SampledLLM().complete("not mine").text)
        mine = SampledLLM().complete("mine").text
        closer = threading.Thread(target=handle.close)  # closing works from anywhere
        closer.start()
        closer.join()
        SampledLLM().complete("after close")  # this context still holds the closed handle
        with instrument(rec) as again:  # which the next instrument() here replaces
            assert again is not handle
    steps = li_store.load_steps(rec.run_id)
    answers = [response_from_json(decode(s.output)["response"]).text for s in steps]
    assert [s.input["prompt"] for s in steps] == ["mine"] and answers == [mine]
    assert elsewhere.startswith("answer ")
    assert (root.event_handlers, root.span_handlers) == before


def test_a_forgotten_handle_in_another_thread_is_closed_once_its_run_ended() -> None:
    store = open_store("memory:")

    def forget() -> Instrumentation:
        with store.record(name="forgotten") as first:
            return instrument(first)  # never closed by its thread

    forgotten = _in_thread(forget)
    before = forgotten.closed
    with store.record(name="next") as second, instrument(second) as handle:
        assert (before, forgotten.closed, handle.closed) == (False, True, False)
