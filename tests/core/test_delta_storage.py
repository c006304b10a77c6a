"""A growing conversation is stored as deltas in PostgreSQL and always read back whole.

The encoder's decisions are checked against hand-built expectations; the load path against
delta rows written by hand in the documented form (docs/canonical-json.md section 3), so it is
tested apart from the recorder; sizes are measured by PostgreSQL itself.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import psycopg
import pytest
from psycopg import sql

from agentreplay_core import SerializationError, Store, canonical_bytes, decode, encode
from agentreplay_core._delta import DeltaEncoder, DeltaResolver, delta_base
from agentreplay_core._transfer import export_run, import_run

MODEL = "gpt-test"
TURNS = 100


def words(seed: int, chars: int) -> str:
    """Text that does not compress to nothing: sizes then measure deduplication, not pglz."""
    rng = random.Random(seed)
    out: list[str] = []
    while sum(map(len, out)) < chars:
        length = rng.randint(2, 9)
        out.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length)))
    return " ".join(out)[:chars]


def conversation(turns: int) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Turn t sends a 1,200-character system prompt and every earlier message again."""
    messages: list[dict[str, str]] = [{"role": "system", "content": words(0, 1_200)}]
    steps = []
    for t in range(turns):
        messages.append({"role": "user", "content": words(2 * t + 1, 300)})
        answer = {"role": "assistant", "content": words(2 * t + 2, 700)}
        steps.append(({"model": MODEL, "temperature": 0.5, "messages": list(messages)}, answer))
        messages.append(answer)
    return steps


def decide(enc: DeltaEncoder, step: int, kind: str, name: str, request: Any,
           answer: Any = None) -> Any:
    """The encoder's stored form for `request` parsed, or None for "store it whole"."""
    tree = encode(request)
    output = None if answer is None else canonical_bytes(encode(answer))
    data = enc.stored_input(step, kind, name, tree, canonical_bytes(tree), output)
    return None if data is None else orjson.loads(data)


# -- the encoder's decisions ------------------------------------------------------------


def test_delta_base_reads_the_base_of_a_stored_form() -> None:
    enc = DeltaEncoder()
    (first, answer), (second, _) = conversation(2)
    tree, second_tree = encode(first), encode(second)
    assert enc.stored_input(7, "llm", MODEL, tree, canonical_bytes(tree),
                            canonical_bytes(encode(answer))) is None
    data = enc.stored_input(9, "llm", MODEL, second_tree, canonical_bytes(second_tree))
    assert data is not None and orjson.loads(data)["base"] == 7
    assert delta_base(data) == 7
    assert delta_base(canonical_bytes(second_tree)) is None
    assert delta_base(b'{"__ar__":"delta","base":12345,"prefix":1,"v":{}}') == 12345


def test_chat_steps_sharing_a_short_system_prompt_are_stored_whole() -> None:
    enc = DeltaEncoder()
    system = {"role": "system", "content": words(7, 400)}
    for step in range(1, 6):
        request = {"model": MODEL, "messages": [system, {"role": "user",
                                                         "content": words(step, 1_500)}]}
        assert decide(enc, step, "llm", "chat", request) is None


def test_a_growing_conversation_is_a_delta_on_the_previous_turn() -> None:
    enc = DeltaEncoder()
    (first, _), (second, _), (third, _) = conversation(3)
    assert decide(enc, 1, "llm", "chat", first) is None  # nothing to share yet
    assert decide(enc, 2, "llm", "chat", second) == {
        "__ar__": "delta", "base": 1, "prefix": 2,
        "v": {"model": MODEL, "temperature": 0.5, "messages": second["messages"][2:]}}
    assert decide(enc, 3, "llm", "chat", third) == {
        "__ar__": "delta", "base": 2, "prefix": 4,
        "v": {"model": MODEL, "temperature": 0.5, "messages": third["messages"][4:]}}


def test_the_answer_that_follows_the_prefix_is_taken_from_the_base_output() -> None:
    enc = DeltaEncoder()
    (first, one), (second, two), (third, three) = conversation(3)
    assert decide(enc, 1, "llm", "chat", first, one) is None
    assert decide(enc, 2, "llm", "chat", second, two) == {
        "__ar__": "delta", "base": 1, "prefix": 2, "output": True,
        "v": {"model": MODEL, "temperature": 0.5, "messages": second["messages"][3:]}}
    # step 3 answers with more than the agent appends next: its output is not referred to
    assert decide(enc, 3, "llm", "chat", third, {**three, "id": "x"}) == {
        "__ar__": "delta", "base": 2, "prefix": 4, "output": True,
        "v": {"model": MODEL, "temperature": 0.5, "messages": third["messages"][5:]}}
    fourth = {**third, "messages": [*third["messages"], three, {"role": "user", "content": "?"}]}
    assert decide(enc, 4, "llm", "chat", fourth) == {
        "__ar__": "delta", "base": 3, "prefix": 6,
        "v": {"model": MODEL, "temperature": 0.5, "messages": [three, fourth["messages"][-1]]}}


def test_only_steps_of_the_same_kind_and_name_are_bases() -> None:
    enc = DeltaEncoder()
    (first, _), (second, _), (third, _) = conversation(3)
    assert decide(enc, 1, "llm", "chat", first) is None
    assert decide(enc, 2, "llm", "other-model", second) is None
    assert decide(enc, 3, "tool", "chat", second) is None
    delta = decide(enc, 4, "llm", "chat", third)
    assert (delta["base"], delta["prefix"]) == (1, 2)


def test_inputs_without_a_messages_list_are_stored_whole() -> None:
    enc = DeltaEncoder()
    long = words(3, 3_000)
    assert decide(enc, 1, "llm", "chat", {"messages": [long]}) is None
    for step, request in enumerate([
        {"messages": {"0": long, "1": "more"}},    # not a list
        {"messages": long + " more"},              # a string
        [long, "more"],                            # not a dict
        {"prompt": [long, "more"]},                # another key
        {"__ar__": "x", "messages": [long, "more"]},  # escaped by encode: a tagged object
    ], start=2):
        assert decide(enc, step, "llm", "chat", request) is None
    # none of them replaced the base: a real next turn still shares the first message
    assert decide(enc, 9, "llm", "chat", {"messages": [long, "next"]})["base"] == 1


def test_an_edited_earlier_message_shortens_the_prefix() -> None:
    enc = DeltaEncoder()
    messages = [{"role": "user", "content": words(i, 600)} for i in range(6)]
    assert decide(enc, 1, "llm", "chat", {"messages": messages}) is None
    edited = [*messages[:3], {"role": "user", "content": "edited"}, *messages[4:], {"x": 1}]
    delta = decide(enc, 2, "llm", "chat", {"messages": edited})
    assert (delta["base"], delta["prefix"]) == (1, 3)
    assert delta["v"]["messages"] == edited[3:]
    # the prefix is now shorter than what was measured before: still right afterwards
    again = [*messages[:2], {"role": "user", "content": "other"}]
    delta = decide(enc, 3, "llm", "chat", {"messages": again})
    assert (delta["base"], delta["prefix"]) == (2, 2)
    # one shared message of 600 characters saves too little
    assert decide(enc, 4, "llm", "chat", {"messages": [*messages[:1], "x"]}) is None


def test_messages_equal_only_by_python_equality_are_not_shared() -> None:
    enc = DeltaEncoder()
    long = words(5, 2_000)
    assert decide(enc, 1, "llm", "chat", {"messages": [{"n": 1, "text": long}, "a"]}) is None
    # 1 == 1.0 == True in Python, but they are stored (and hashed) as 1, 1.0 and true
    assert decide(enc, 2, "llm", "chat", {"messages": [{"n": 1.0, "text": long}, "b"]}) is None
    assert decide(enc, 3, "llm", "chat", {"messages": [{"n": True, "text": long}, "c"]}) is None
    delta = decide(enc, 4, "llm", "chat", {"a": 1.5, "messages": [{"n": True, "text": long}]})
    assert (delta["base"], delta["prefix"], delta["v"]) == (3, 1, {"a": 1.5, "messages": []})


def test_a_step_stored_as_a_marker_is_no_base() -> None:
    enc = DeltaEncoder()
    (first, _), _, (third, _) = conversation(3)
    assert decide(enc, 1, "llm", "chat", first) is None
    assert enc.stored_input(2, "llm", "chat", None, b'{"__ar__":"unencodable"}') is None
    assert decide(enc, 3, "llm", "chat", third)["base"] == 1


def test_resolver_rebuilds_hand_written_deltas_and_marks_broken_ones() -> None:
    (first, one), (second, two), (third, _) = conversation(3)
    f, s, t = encode(first), encode(second), encode(third)
    res = DeltaResolver()
    assert res.resolve(1, f, encode(one)) is f
    assert res.resolve(2, {"__ar__": "delta", "base": 1, "prefix": 2,
                           "v": {**s, "messages": s["messages"][2:]}}, encode(two)) == s
    assert res.resolve(3, {"__ar__": "delta", "base": 2, "prefix": 4, "output": True,
                           "v": {**t, "messages": t["messages"][5:]}}, None) == t
    broken = {
        "missing base": {"__ar__": "delta", "base": 7, "prefix": 1, "v": {"messages": []}},
        "later base": {"__ar__": "delta", "base": 12, "prefix": 1, "v": {"messages": []}},
        "prefix too long": {"__ar__": "delta", "base": 3, "prefix": 99, "v": {"messages": []}},
        "no messages": {"__ar__": "delta", "base": 3, "prefix": 1, "v": {"prompt": "x"}},
        "odd output": {"__ar__": "delta", "base": 3, "prefix": 1, "output": 1,
                       "v": {"messages": []}},
        "unknown key": {"__ar__": "delta", "base": 3, "prefix": 1, "x": 1,
                        "v": {"messages": []}},
    }
    for why, stored in broken.items():
        marker = res.resolve(10, stored, None)
        assert marker["__ar__"] == "unencodable", why
        with pytest.raises(SerializationError, match="input of step 10 is stored as a delta"):
            decode(marker)


def test_whatever_the_encoder_stores_the_resolver_rebuilds_exactly() -> None:
    """Interleaved conversations of two models, edits, retries, answers appended or not, and
    numbers that are equal in Python but not in JSON, through a JSON round trip."""
    rng = random.Random(42)
    enc, res = DeltaEncoder(), DeltaResolver()
    chats: dict[str, list[Any]] = {"a": [], "b": []}
    deltas = 0
    for step in range(1, 400):
        name = rng.choice("ab")
        messages = chats[name]
        roll = rng.random()
        if roll < 0.1 and messages:  # an earlier message edited
            messages[rng.randrange(len(messages))] = {"content": words(step, 50)}
        elif roll < 0.2 and messages:  # a number equal to the one before only in Python
            i = rng.randrange(len(messages))
            messages[i] = {**messages[i], "n": rng.choice([1, 1.0, True])}
        elif roll > 0.9:  # a retry: the same request again
            pass
        else:
            messages.append({"role": "user", "n": 1,
                             "content": words(step, rng.randint(10, 900))})
        request = encode({"model": name, "messages": list(messages)})
        answer = encode({"role": "assistant", "content": words(-step, rng.randint(10, 900))})
        data = enc.stored_input(step, "llm", name, request, canonical_bytes(request),
                                canonical_bytes(answer))
        stored = request if data is None else orjson.loads(data)
        deltas += data is not None
        resolved = res.resolve(step, orjson.loads(orjson.dumps(stored)), answer)
        assert canonical_bytes(resolved) == canonical_bytes(request), step
        if rng.random() < 0.5:  # the agent appends the answer, and sometimes more
            messages.append(answer)
    assert deltas > 200


# -- PostgreSQL ---------------------------------------------------------------------------


def execute(dsn: str, schema: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema)), params)
        return cur.fetchall() if cur.description else []


def record(store: Store, turns: int = TURNS) -> tuple[UUID, list[Any]]:
    """Record a conversation; the run and the encoded requests, as the test expects them."""
    steps = conversation(turns)
    with store.record(name="chat") as rec:
        for request, answer in steps:
            rec.record("llm", MODEL, request, answer)
    return rec.run_id, [encode(request) for request, _ in steps]


def rewrite_as_deltas(dsn: str, schema: str, run_id: UUID, requests: list[Any]) -> None:
    """Store every input but the first as a delta on the step before, built by hand: odd
    steps take the answer from the base's output, even ones hold it."""
    for step in range(2, len(requests) + 1):
        prefix = len(requests[step - 2]["messages"])
        own = prefix + step % 2
        v = {**requests[step - 1], "messages": requests[step - 1]["messages"][own:]}
        form = {"__ar__": "delta", "base": step - 1, "prefix": prefix, "v": v}
        if step % 2:
            form["output"] = True
        execute(dsn, schema, "UPDATE {s}.run_log SET input = %s::jsonb WHERE run_id = %s "
                "AND step = %s", orjson.dumps(form).decode(), run_id, step)


def input_bytes(dsn: str, schema: str, run_id: UUID) -> int:
    rows = execute(dsn, schema, "SELECT sum(pg_column_size(input)) FROM {s}.run_log "
                   "WHERE run_id = %s", run_id)
    return int(rows[0][0])


def test_delta_rows_load_whole_verify_and_take_a_fraction_of_the_space(
        pg_store: Store, pg_dsn: str, pg_schema: str) -> None:
    run_id, requests = record(pg_store)
    rewrite_as_deltas(pg_dsn, pg_schema, run_id, requests)  # replacing any the recorder made
    logical = sum(len(canonical_bytes(r)) for r in requests)
    assert input_bytes(pg_dsn, pg_schema, run_id) < logical / 20
    steps = pg_store.load_steps(run_id)
    assert [s.input for s in steps] == requests
    assert pg_store.verify(run_id).ok
    with pg_store.replay(run_id) as player:
        for request, answer in conversation(TURNS):
            assert player.next("llm", MODEL, request) == answer


def test_recording_a_conversation_stores_deltas(
        pg_store: Store, pg_dsn: str, pg_schema: str) -> None:
    run_id, requests = record(pg_store)
    deltas = execute(pg_dsn, pg_schema, "SELECT count(*) FROM {s}.run_log WHERE run_id = %s "
                     "AND input->>'__ar__' = 'delta'", run_id)
    assert deltas[0][0] == TURNS - 1  # every turn after the first shares 1,500+ characters
    execute(pg_dsn, pg_schema, "VACUUM FULL {s}.run_log")
    total = execute(pg_dsn, pg_schema, "SELECT pg_total_relation_size(%s::regclass)",
                    f'"{pg_schema}".run_log')[0][0]
    logical = sum(len(canonical_bytes(r)) for r in requests)
    assert total < logical / 10  # table + TOAST + indexes, against the inputs alone
    assert [s.input for s in pg_store.load_steps(run_id)] == requests
    assert pg_store.verify(run_id).ok


def test_a_delta_on_a_row_the_database_refused_is_stored_whole(
        pg_store: Store, pg_dsn: str, pg_schema: str) -> None:
    """A refused row is lost (loudly, counted); the turn after it, which the encoder made a
    delta on it, is stored whole instead of unreadable, and the turns after that are deltas
    on it again."""
    execute(pg_dsn, pg_schema,
            "CREATE FUNCTION {s}.refuse_3() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.step = 3 THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'data_exception'; "
            "END IF; RETURN NEW; END $$; CREATE TRIGGER refuse_3 BEFORE INSERT ON {s}.run_log "
            "FOR EACH ROW EXECUTE FUNCTION {s}.refuse_3()")
    run_id, requests = record(pg_store, 7)

    steps = pg_store.load_steps(run_id)
    assert [s.step for s in steps] == [1, 2, 4, 5, 6, 7]
    assert [s.input for s in steps] == [requests[n - 1] for n in (1, 2, 4, 5, 6, 7)]
    bases = dict(execute(pg_dsn, pg_schema, "SELECT step, CASE WHEN input->>'__ar__' = "
                         "'delta' THEN (input->>'base')::int END FROM {s}.run_log "
                         "WHERE run_id = %s", run_id))
    assert [bases[n] for n in (2, 4, 5, 6, 7)] == [1, None, 4, 5, 6]
    report = pg_store.verify(run_id)
    assert [(p.step, p.code) for p in report.problems][:1] == [(3, "missing_step")]


def test_a_tampered_base_fails_verification_of_it_and_its_deltas(
        pg_store: Store, pg_dsn: str, pg_schema: str) -> None:
    run_id, requests = record(pg_store, 6)
    rewrite_as_deltas(pg_dsn, pg_schema, run_id, requests)
    execute(pg_dsn, pg_schema, "UPDATE {s}.run_log SET input = jsonb_set(input, "
            "'{{v,messages,0,content}}', '\"forged\"') WHERE run_id = %s AND step = 3", run_id)
    report = pg_store.verify(run_id)
    assert {p.step for p in report.problems} == {3, 4, 5, 6}  # 4-6 take step 3's messages
    assert all(p.code == "checksum_mismatch" for p in report.problems)
    assert "step 4" in str(report)
    # the steps after it say they may be untouched, and which step to look at first
    said = {p.step: p.message for p in report.problems}
    assert "or only step 3 before it was" not in said[3]
    assert all("or only step 3 before it was" in said[n] for n in (4, 5, 6))
    assert [m["content"] for m in pg_store.load_steps(run_id)[3].input["messages"]].count(
        "forged") == 1


def test_a_tampered_base_output_fails_the_delta_that_takes_it(
        pg_store: Store, pg_dsn: str, pg_schema: str) -> None:
    run_id, requests = record(pg_store, 6)
    rewrite_as_deltas(pg_dsn, pg_schema, run_id, requests)  # step 5 takes step 4's output
    execute(pg_dsn, pg_schema, "UPDATE {s}.run_log SET output = jsonb_set(output, "
            "'{{content}}', '\"forged\"') WHERE run_id = %s AND step = 4", run_id)
    report = pg_store.verify(run_id)
    assert {p.step for p in report.problems} == {4, 5, 6}
    assert pg_store.load_steps(run_id)[4].input["messages"][8]["content"] == "forged"


def test_a_missing_base_fails_verification_without_failing_the_load(
        pg_store: Store, pg_dsn: str, pg_schema: str) -> None:
    run_id, requests = record(pg_store, 6)
    rewrite_as_deltas(pg_dsn, pg_schema, run_id, requests)
    execute(pg_dsn, pg_schema, "DELETE FROM {s}.run_log WHERE run_id = %s AND step = 3", run_id)
    steps = pg_store.load_steps(run_id)
    assert [s.step for s in steps] == [1, 2, 4, 5, 6]
    assert steps[1].input == requests[1]
    for step in steps[2:]:  # 4 lost its base, and 5 and 6 theirs through it
        assert step.input["__ar__"] == "unencodable"
        with pytest.raises(SerializationError, match=f"input of step {step.step} is stored as "
                                                     f"a delta on step {step.step - 1}"):
            decode(step.input)
    report = pg_store.verify(run_id)
    assert not report.ok
    assert [(p.step, p.code) for p in report.problems if p.step is not None][:2] == [
        (3, "missing_step"), (4, "unverifiable_after_gap")]
    assert {p.step for p in report.problems} >= {3, 4, 5, 6}


def test_export_import_and_fork_carry_logical_inputs(
        pg_store: Store, pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    run_id, requests = record(pg_store, 12)
    rewrite_as_deltas(pg_dsn, pg_schema, run_id, requests)
    exported = export_run(pg_store, run_id, tmp_path / "chat.jsonl")
    assert exported.report.ok
    lines = [orjson.loads(line) for line in (tmp_path / "chat.jsonl").read_bytes().splitlines()]
    assert [line["input"] for line in lines if "input" in line] == requests
    pg_store.delete_run(run_id)
    imported = import_run(pg_store, tmp_path / "chat.jsonl")
    assert imported.report.ok
    assert [s.input for s in pg_store.load_steps(run_id)] == requests
    # stored as recording stores it: every turn after the first a delta, a fraction of the size
    deltas = execute(pg_dsn, pg_schema, "SELECT count(*) FROM {s}.run_log WHERE run_id = %s "
                     "AND input->>'__ar__' = 'delta'", run_id)
    assert deltas[0][0] == len(requests) - 1
    assert input_bytes(pg_dsn, pg_schema, run_id) < sum(
        len(canonical_bytes(r)) for r in requests) / 4
    assert pg_store.verify(run_id).ok

    rewrite_as_deltas(pg_dsn, pg_schema, run_id, requests)
    steps = conversation(12)
    with pg_store.replay(run_id, on_divergence="live") as player:
        for request, answer in steps[:8]:
            assert player.next("llm", MODEL, request) == answer
        changed = {**steps[8][0], "temperature": 0.9}
        assert player.next("llm", MODEL, changed, live=lambda: {"content": "live"}) == {
            "content": "live"}
        assert player.fork is not None
        fork_id = player.fork.run_id
    fork = pg_store.load_steps(fork_id)
    assert [s.input for s in fork] == [*requests[:8], encode(changed)]
    assert pg_store.verify(fork_id).ok
