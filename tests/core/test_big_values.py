"""Big and deep values (issue 8): recorded and replayed, or refused with a clear error, and
never an unbounded memory spike.

Each case runs in a child process of its own, which builds the value, records one run (batched
writer), replays it and checks the replayed value, then reports its peak RSS (`VmHWM`, else
`ru_maxrss`) before and after. The growth must stay within `K` times the value's size as
canonical JSON, plus `SLACK` for one-off allocations (connection pool, thread stacks, the
decoded copy of a small tree); the figures are in the module's log output (`-s`).

- a tool result of 50 MiB (one string, and a list of 160,000 small documents),
- a chat request of 10,000 messages (and a divergence in message 5,000),
- values nested 1,000 levels deep: refused (the most JSON storage allows is 252), the agent
  gets its value, replay raises a `SerializationError` naming the step;
- a value larger than the recorder's `max_value_bytes`: refused the same way.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import ReplayDivergence, SerializationError, Store

log = logging.getLogger(__name__)

MIB = 1 << 20
#: allowed peak RSS growth per byte of canonical JSON (see each case for what it holds)
K = {"string": 7, "documents": 10, "messages": 12, "deep": 0}
#: allowed growth besides, for what does not scale with the value
SLACK = 48 * MIB

CHILD = textwrap.dedent('''
    import gc, json, resource, sys, time
    from agentreplay_core import SerializationError, open_store
    from agentreplay_core._codec import canonical_bytes, encode

    case, url, schema = sys.argv[1:4]
    options = {"schema": schema} if url.startswith("postgresql") else {}
    MIB = 1 << 20

    def peak():
        # VmHWM: the peak of this process's own memory. ru_maxrss would do elsewhere, but on
        # Linux it also counts the parent's RSS at fork, which hides peaks below it.
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def build():
        if case == "deep":  # 1,000 levels: refused (the limit is 252), nothing to store
            deep = 1
            for _ in range(1000):
                deep = [deep]
            return {"q": 1}, deep
        if case == "string":  # text with quotes, newlines and tabs to escape
            chunk = 'log line "quoted" \\\\ path\\n\\tindented ' * 8
            return {"path": "/big"}, (chunk * (50 * MIB // len(chunk) + 1))[:50 * MIB]
        if case == "documents":
            docs = [{"id": i, "title": f"document {i}", "score": i / 7, "tags": ["a", "b"],
                     "body": f"{i:08d} " + "lorem ipsum dolor sit amet " * 9}
                    for i in range(160_000)]
            return {"query": "everything"}, docs
        messages = [{"role": "user" if i % 2 else "assistant",
                     "content": f"message {i}: " + "please summarise the above " * 8}
                    for i in range(10_000)]
        return {"model": "gpt-4o", "messages": messages}, {"content": "done"}

    request, result = build()
    store = open_store(url, **options)
    with store.record(name="warm-up") as rec:  # pool, writer thread: not the value's cost
        rec.record("tool", "warm", {}, 0)
    gc.collect()
    before = peak()
    t0 = time.perf_counter()
    kind = "llm" if case == "messages" else "tool"
    with store.record(name=case) as rec:
        got = rec.call(kind, case, request, lambda: result)
    assert got is result and rec.stats.unencodable == (case == "deep"), rec.stats
    recorded = time.perf_counter() - t0
    after_record = peak()
    with store.replay(rec.run_id) as player:
        if case == "deep":
            try:
                player.next(kind, case, request)
                raise AssertionError("a refused value was replayed")
            except SerializationError as exc:
                assert "nested more than 252 levels" in str(exc), exc
        else:
            assert player.next(kind, case, request) == result
    replayed = time.perf_counter() - t0 - recorded
    store.close()
    figures = {"case": case, "before": before, "after_record": after_record, "peak": peak(),
               "record_s": round(recorded, 2), "replay_s": round(replayed, 2)}
    # measured last: these copies must not count as the peak of recording or replaying
    value = [1] if case == "deep" else result  # the refused value was not stored at all
    figures["bytes"] = len(canonical_bytes(encode(request))) + len(canonical_bytes(encode(value)))
    print(json.dumps(figures))
''')


def measure(case: str, url: str, schema: str = "") -> dict[str, Any]:
    child = subprocess.run([sys.executable, "-c", CHILD, case, url, schema],
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    figures: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    growth = figures["peak"] - figures["before"]
    log.warning("%s on %s: %.1f MiB of JSON, peak RSS %.0f -> %.0f (recorded) -> %.0f MiB "
                "(+%.0f MiB, %.1fx), record %.2fs, replay %.2fs", case, url.split(":")[0],
                figures["bytes"] / MIB, figures["before"] / MIB, figures["after_record"] / MIB,
                figures["peak"] / MIB, growth / MIB, growth / figures["bytes"],
                figures["record_s"], figures["replay_s"])
    assert growth < K[case] * figures["bytes"] + SLACK, figures
    return figures


@pytest.mark.parametrize("case", ["string", "documents", "messages", "deep"])
def test_big_values_record_and_replay_in_postgresql_within_bounded_memory(
    pg_dsn: str, pg_schema: str, case: str
) -> None:
    measure(case, pg_dsn, pg_schema)


@pytest.mark.parametrize("case", ["string", "documents", "messages", "deep"])
def test_big_values_record_and_replay_in_files_within_bounded_memory(
    tmp_path: Path, case: str
) -> None:
    measure(case, f"file:{tmp_path / 'runs'}")


# --- refused values, on every store ---------------------------------------------------------


def nested(depth: int, leaf: Any = "leaf") -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"level": value}
    return value


def test_values_nested_1000_deep_are_refused_and_replay_names_the_step(any_store: Store
                                                                       ) -> None:
    deep = nested(1000)
    with any_store.record() as rec:
        rec.record("tool", "warm", {}, "ok")
        got = rec.call("tool", "deep_output", {"q": 1}, lambda: deep)
        answer = rec.call("tool", "deep_input", {"doc": deep}, lambda: "fine")
    assert got is deep and answer == "fine"  # the agent never notices
    assert rec.stats.unencodable == 2 and rec.stats.internal_errors == 0
    assert any_store.verify(rec.run_id).ok
    with any_store.replay(rec.run_id, allow_unused=True) as player:
        assert player.next("tool", "warm", {}) == "ok"
        with pytest.raises(SerializationError) as caught:
            player.next("tool", "deep_output", {"q": 1})
        message = str(caught.value)
        assert message.startswith(f"step 2 of run {rec.run_id} (tool 'deep_output'): ")
        assert "nested more than 252 levels deep" in message and "at output[0].level[0]" in message
        with pytest.raises(SerializationError, match=r"nested more than 252 levels .*request"):
            player.next("tool", "deep_input", {"doc": deep})  # the request itself is refused


def test_values_over_max_value_bytes_are_refused_and_replay_names_the_step(any_store: Store
                                                                          ) -> None:
    big = "x" * (2 * MIB)
    with any_store.record() as rec:
        rec.max_value_bytes = MIB
        got = rec.call("tool", "fetch", {"url": "https://example.com/big"}, lambda: big)
        small = rec.call("tool", "fetch", {"url": "https://example.com/small"}, lambda: "tiny")
    assert got is big and small == "tiny" and rec.stats.unencodable == 1
    steps = any_store.load_steps(rec.run_id)
    assert len(str(steps[0].output)) < 2000  # a marker, not the value
    with any_store.replay(rec.run_id) as player:
        with pytest.raises(SerializationError) as caught:
            player.next("tool", "fetch", {"url": "https://example.com/big"})
        assert player.next("tool", "fetch", {"url": "https://example.com/small"}) == "tiny"
    message = str(caught.value)
    assert message.startswith(f"step 1 of run {rec.run_id} (tool 'fetch'): ")
    assert f"{len(big) + 2:,} bytes of JSON, more than max_value_bytes={MIB:,}" in message
    assert "xxxxxxxx" in message  # what the value began with


def test_a_prompt_of_10000_messages_diverges_with_a_short_precise_report(any_store: Store
                                                                        ) -> None:
    messages = [{"role": "user", "content": f"message {i}: " + "summarise this " * 8}
                for i in range(10_000)]
    with any_store.record() as rec:
        rec.call("llm", "chat", {"messages": messages}, lambda: {"content": "done"})
    changed = [dict(m) for m in messages]
    changed[5000]["content"] = "edited"
    with any_store.replay(rec.run_id, allow_unused=True) as player, \
            pytest.raises(ReplayDivergence) as caught:
        player.next("llm", "chat", {"messages": changed})
    assert caught.value.classification == "prompt_changed"
    assert "messages[5000].content" in str(caught.value)
    assert len(str(caught.value)) < 2000  # not 10,000 messages dumped into the error
