"""Wrong arguments and misplaced calls get one clear error at the call that is wrong, never a
bare AttributeError from deep inside, nor a silent wrong result."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import AgentReplayError, open_store
from agentreplay_core._transfer import MalformedExport, export_run, import_run


@pytest.mark.parametrize(("arguments", "error", "message"), [
    ({"metadata": "ticket 42"}, TypeError, "metadata= takes a dict, not str"),
    ({"metadata": [("ticket", 42)]}, TypeError, "metadata= takes a dict, not list"),
    ({"name": 123}, TypeError, "run name must be a string, not int"),
    ({"tags": "nightly"}, TypeError, "tags= takes a list of strings, not a bare str"),
    ({"tags": ["ok", 7]}, TypeError, "tags must be strings, got 7"),
    ({"run_id": "not-a-uuid"}, ValueError, "run_id='not-a-uuid' is not a UUID"),
])
def test_record_refuses_arguments_of_the_wrong_type(arguments: dict[str, Any],
                                                    error: type[Exception], message: str) -> None:
    with open_store("memory:") as store:
        with pytest.raises(error) as caught, store.record(**arguments):
            pass
        assert str(caught.value) == message
        assert store.list_runs() == []  # refused before anything was written


def test_record_takes_a_run_id_as_text_and_no_tags_as_none() -> None:
    wanted = "0b7e6c1e-3f0e-4d55-9a3c-2f1f0c0d9e11"
    with open_store("memory:") as store:
        with store.record(run_id=wanted, tags=None) as rec:
            rec.record("tool", "t", {}, 1)
        assert str(rec.run_id) == wanted
        assert "tags" not in store.get_run(wanted).metadata


def test_a_call_after_the_replay_block_is_refused_not_served() -> None:
    """The block's end checks what was replayed; a player used after it used to go on
    serving steps (with allow_unused) or report a vague divergence."""
    with open_store("memory:") as store:
        with store.record() as rec:
            rec.call("tool", "lookup", {"q": 1}, lambda: "first")
            rec.call("tool", "lookup", {"q": 1}, lambda: "second")
        with store.replay(rec.run_id, allow_unused=True) as player:
            assert player.next("tool", "lookup", {"q": 1}) == "first"
        with pytest.raises(AgentReplayError, match=r"the replay of run .* has ended .*"
                           r"so tool 'lookup' cannot be served from it"):
            player.next("tool", "lookup", {"q": 1})
        with store.replay(rec.run_id) as player:
            player.next("tool", "lookup", {"q": 1})
            player.next("tool", "lookup", {"q": 1})
        with pytest.raises(AgentReplayError, match="has ended"):
            player.next("tool", "lookup", {"q": 1})


@pytest.mark.parametrize("content", [
    os.urandom(4096).replace(b"\n", b" "),
    b"hello\nnot a run file",
    b'{"event": "login"}\n{"event": "log',
])
def test_a_file_that_is_no_export_is_not_called_truncated(tmp_path: Path,
                                                          content: bytes) -> None:
    path = tmp_path / "thing.jsonl"
    path.write_bytes(content)
    with open_store("memory:") as store:
        with pytest.raises(MalformedExport, match="not an agentreplay export"):
            import_run(store, path)
        with store.record() as rec:
            rec.record("tool", "t", {}, 1)
        good = export_run(store, rec.run_id, tmp_path / "good.jsonl").path
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(good.read_bytes()[:-30])  # an export cut short is still called so
    with open_store("memory:") as store, pytest.raises(MalformedExport, match="truncated"):
        import_run(store, cut)
