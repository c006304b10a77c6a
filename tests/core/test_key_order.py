"""The key order of a model's tool-call arguments survives every store (which sort keys)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentreplay_core import Store, decode
from agentreplay_core._key_order import in_key_order, key_order

ARGS: dict[str, Any] = {"query": "flights", "max_results": 3, "filters": {
    "to": "LYS", "from": "CDG", "legs": [{"z": 1, "a": 2}, {"a": 1, "z": 2}, 7]},
    "bb": True, "a": None}


def test_the_order_of_every_dict_comes_back_from_each_store(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "plan", {}, {"args": ARGS, "order": key_order(ARGS)})
    [step] = any_store.load_steps(rec.run_id)
    stored = step.output
    assert json.dumps(stored["args"]) != json.dumps(ARGS)  # the store does not keep it
    assert json.dumps(in_key_order(stored["args"], stored["order"])) == json.dumps(ARGS)


def test_sorted_dicts_need_no_spec_and_come_back_sorted() -> None:
    assert key_order({"a": 1, "b": {"c": 1, "d": [{"e": 1, "f": 2}]}}) is None
    assert key_order([1, "x", None]) is None
    # a store's own order (JSONB puts shorter keys first) is not kept either
    assert list(in_key_order({"bb": 1, "a": 2, "c": 3}, None)) == ["a", "bb", "c"]


def test_a_spec_that_does_not_fit_is_ignored() -> None:
    value = {"b": 1, "a": 2}
    damaged: Any
    for damaged in ({"keys": ["b", "a", "c"]}, {"keys": ["b"]}, {"keys": "ba"},
                    {"keys": [["b"], "a"]}, {"keys": ["b", "b"]}, "keys", 7,
                    {"inner": []}, {"items": {"0": 1}}):
        assert json.dumps(in_key_order(value, damaged)) == '{"a": 2, "b": 1}'
    assert in_key_order([{"b": 1, "a": 2}], {"items": []}) == [{"a": 2, "b": 1}]


def test_keys_that_do_not_sort_are_left_as_they_are() -> None:
    mixed: dict[Any, Any] = {2: "two", "one": 1}
    assert list(in_key_order(mixed, None)) == [2, "one"]


#: dicts with keys that are no strings, which the codec stores as pairs sorted by key: a
#: ranking by shirt number, keys of mixed types, tuples, a map inside a map and in a list
MAPS: dict[str, Any] = {
    "ranking": {10: "Messi", 7: "Ronaldo", 9: {"z": 1, "a": 2}},
    "mixed": {"z": 1, 5: 2, "a": 3, None: 4, 2.5: 5},
    "tuples": {(2, "b"): 1, (1, "a"): {30: "x", 4: "y"}},
    "listed": [{3: "c", 1: "a"}, {"b": {True: 1, False: 0}}],
}


def test_the_order_of_dicts_with_keys_that_are_no_strings_comes_back(
        any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "rank", {}, {"value": MAPS, "order": key_order(MAPS)})
    [step] = any_store.load_steps(rec.run_id)
    stored = decode(step.output)
    assert repr(stored["value"]) != repr(MAPS)  # the codec sorts their pairs
    assert repr(in_key_order(stored["value"], stored["order"])) == repr(MAPS)


def test_a_map_spec_that_does_not_fit_is_ignored() -> None:
    value = {2: "b", 1: "a"}
    damaged: Any
    for damaged in ({"map": [2, 1, 3]}, {"map": [2]}, {"map": [[2], 1]}, {"map": 7},
                    {"map": [2, 1], "map_inner": [[[1], 2]]}, {"map": [2, 1], "map_inner": 3},
                    {"map": [2, 1], "map_inner": [[1, 2, 3]]}):
        assert list(in_key_order(value, damaged)) == [2, 1]


@dataclass(frozen=True)
class Update:
    """Like LangGraph's `Command`: a frozen dataclass holding dicts in the writer's order."""

    update: dict[str, Any]
    goto: list[Any]


def test_the_dicts_of_a_dataclass_come_back_in_order(any_store: Store) -> None:
    # unsorted (a spec), and sorted (no spec: the store's order, JSONB's shorter keys
    # first, must not show either)
    value = Update(update={"notes": ["n"], "messages": [{"z": 1, "a": 2}], "bb": {1: "x"}},
                   goto=[{"messages": 1, "notes": 2}])
    with any_store.record() as rec:
        rec.record("tool", "command", {}, {"value": value, "order": key_order(value)})
    [step] = any_store.load_steps(rec.run_id)
    stored = decode(step.output)
    assert repr(in_key_order(stored["value"], stored["order"])) == repr(value)
    assert key_order(Update({"a": 1}, [])) is None
