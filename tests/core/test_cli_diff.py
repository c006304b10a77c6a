"""`agentreplay diff RUN_A RUN_B` and the step alignment behind it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from agentreplay_core import Recorder, Store, open_store
from agentreplay_core._run_compare import compare_steps
from tests.core.test_cli_runs import agentreplay, one_line_error

Agent = Callable[[Recorder], None]


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def ask(rec: Recorder, content: str, answer: str, *, model: str = "gpt-4o",
        temperature: float = 0.0) -> None:
    request = {"messages": [{"role": "user", "content": content}], "temperature": temperature}
    rec.record("llm", model, request, {"content": answer})


def travel_agent(city: str = "Paris", *, extra: bool = False) -> Agent:
    def run(rec: Recorder) -> None:
        ask(rec, "Plan a trip", "Search flights first")
        rec.record("tool", "search_flights", {"from": "Berlin"}, ["09:40", "17:05"])
        ask(rec, f"Pick a flight to {city} from 09:40, 17:05", "Take the 09:40")
        rec.record("tool", "book", {"flight": "09:40"}, {"ok": True})
        if extra:
            rec.record("tool", "send_email", {"to": "me"}, "sent")
    return run


def record(store: Store, agent: Agent, name: str = "travel") -> UUID:
    with store.record(name=name, durability="sync") as rec:
        agent(rec)
    return rec.run_id


def test_diff_names_the_first_divergence_and_exits_1(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        base = record(store, travel_agent())
        same = record(store, travel_agent())
        changed = record(store, travel_agent("Lyon", extra=True))
    where = ("--dsn", pg_dsn, "--schema", pg_schema)

    identical = agentreplay("diff", str(base), str(same)[:8], *where)
    assert identical.returncode == 0, identical.stderr
    assert "identical in what was asked and answered (4 steps)" in identical.stdout

    result = agentreplay("diff", str(base), str(changed), "--json", *where)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    first = report["first_divergence"]
    assert (first["step_a"], first["step_b"], first["kind"], first["classification"]) == (
        3, 3, "llm", "prompt_changed")
    assert [(c["path"], c["op"]) for c in first["changes"]] == [
        ("messages[0].content", "changed")]
    assert [(s["step_a"], s["step_b"], s["status"]) for s in report["steps"]] == [
        (1, 1, "same"), (2, 2, "same"), (3, 3, "differs"), (4, 4, "same"),
        (None, 5, "only_b")]
    assert report["steps"][4]["classification"] == "unexpected_call"
    assert report["identical"] is False
    assert report["counts"] == {"same": 3, "differs": 1, "only_a": 0, "only_b": 1}

    shown = agentreplay("diff", str(base), str(changed), *where)
    assert shown.returncode == 1
    assert "first divergence at A step 3 / B step 3: prompt_changed, llm 'gpt-4o'" in shown.stdout
    assert "[-Paris-]{+Lyon+}" in shown.stdout or ("Paris" in shown.stdout
                                                    and "Lyon" in shown.stdout)
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert ["-", "5", "only", "in", "B", "tool", "send_email", "unexpected_call"] in lines
    assert "3 same, 1 differs, 1 only in B" in shown.stdout

    unknown = agentreplay("diff", str(base), "0000", *where)
    assert "no run with id 0000" in one_line_error(unknown)


def test_diff_ignore_kind_and_a_file_store(tmp_path: Path) -> None:
    url = f"file:{tmp_path / 'runs'}"

    def with_clock(stamp: float) -> Agent:
        def run(rec: Recorder) -> None:
            travel_agent()(rec)
            rec.record("time", "time.time", {}, stamp)
        return run

    with open_store(url) as store:
        first = record(store, with_clock(1000.0))
        second = record(store, with_clock(2000.0))
    differs = agentreplay("diff", str(first), str(second), "--json", "--dsn", url)
    assert differs.returncode == 1
    report = json.loads(differs.stdout)
    assert report["first_divergence"]["classification"] == "output_changed"
    assert report["first_divergence"]["step_a"] == 5
    ignored = agentreplay("diff", str(first), str(second), "--ignore-kind", "time",
                          "--dsn", url)
    assert ignored.returncode == 0, ignored.stdout + ignored.stderr
    assert "identical" in ignored.stdout


def steps_of(agent_a: Agent, agent_b: Agent) -> list[tuple[Any, ...]]:
    """(status, step in A, step in B, classification, moved_to) of each aligned row."""
    with open_store("memory:") as store:
        a, b = record(store, agent_a), record(store, agent_b)
        result = compare_steps(store.load_steps(a), store.load_steps(b))
    return [(p.status, p.a.step if p.a else None, p.b.step if p.b else None,
             p.classification, p.moved_to) for p in result.pairs]


def test_alignment_classifies_each_kind_of_change() -> None:
    def swapped(rec: Recorder) -> None:
        ask(rec, "Plan a trip", "Search flights first")
        ask(rec, "Pick a flight to Paris from 09:40, 17:05", "Take the 09:40")
        rec.record("tool", "search_flights", {"from": "Berlin"}, ["09:40", "17:05"])
        rec.record("tool", "book", {"flight": "09:40"}, {"ok": True})

    # either swapped step can be the one that moved; both readings are right
    assert steps_of(travel_agent(), swapped) in ([
        ("same", 1, 1, None, None),
        ("only_a", 2, None, "order_changed", 3),
        ("same", 3, 2, None, None),
        ("only_b", None, 3, "order_changed", 2),
        ("same", 4, 4, None, None),
    ], [
        ("same", 1, 1, None, None),
        ("only_b", None, 2, "order_changed", 3),
        ("same", 2, 3, None, None),
        ("only_a", 3, None, "order_changed", 2),
        ("same", 4, 4, None, None),
    ])

    def shorter(rec: Recorder) -> None:
        ask(rec, "Plan a trip", "Search flights first")
        rec.record("tool", "search_flights", {"from": "Berlin"}, ["09:40", "17:05"])

    assert [row[0::3] for row in steps_of(travel_agent(), shorter)] == [
        ("same", None), ("same", None), ("only_a", "missing_call"), ("only_a", "missing_call")]

    def tweaked(rec: Recorder) -> None:
        ask(rec, "Plan a trip", "Search flights first", model="gpt-5")  # another model
        rec.record("tool", "search_flights", {"from": "Munich"}, ["09:40", "17:05"])
        ask(rec, "Pick a flight to Paris from 09:40, 17:05", "Take the 09:40", temperature=0.7)
        rec.record("tool", "book", {"flight": "09:40"}, {"ok": False})  # another answer

    assert [(row[0], row[3]) for row in steps_of(travel_agent(), tweaked)] == [
        ("differs", "params_changed"), ("differs", "tool_args_changed"),
        ("differs", "params_changed"), ("differs", "output_changed")]
