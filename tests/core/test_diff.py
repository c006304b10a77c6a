"""Divergence diffs: what a user reads when a replayed call matches no recorded step."""

from __future__ import annotations

import copy
import datetime as dt
import math
import re
from typing import Any

import numpy as np
import pytest

from agentreplay_core._diff import (
    Candidate,
    DiffEntry,
    classify,
    nearest_candidates,
    render_diff,
    similarity,
    structural_diff,
    summarize,
)
from agentreplay_core._errors import ReplayDivergence

QUEUE_STATE_CLASSIFICATIONS = {"unexpected_call", "missing_call", "order_changed"}


def chat_request() -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "You are a weather assistant."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "It is sunny in Paris."},
            {"role": "user", "content": "And tomorrow?"},
        ],
    }


def test_changed_message_content_is_one_entry_showing_both_texts() -> None:
    actual = chat_request()
    actual["messages"][1]["content"] = "What is the weather in Lyon?"

    entries = structural_diff(chat_request(), actual)

    assert entries == [
        DiffEntry(
            "messages[1].content",
            "changed",
            "What is the weather in Paris?",
            "What is the weather in Lyon?",
        )
    ]
    assert render_diff(entries) == (
        "~ messages[1].content: 'What is the weather in Paris?' -> 'What is the weather in Lyon?'"
    )
    assert classify("llm", entries) == "prompt_changed"


def test_inserted_message_is_one_added_entry() -> None:
    actual = chat_request()
    actual["messages"].insert(2, {"role": "tool", "content": "22C, clear sky"})

    entries = structural_diff(chat_request(), actual)

    assert [(e.path, e.op) for e in entries] == [("messages[2]", "added")]
    assert render_diff(entries) == "+ messages[2]: {'role': 'tool', 'content': '22C, clear sky'}"
    assert classify("llm", entries) == "prompt_changed"


def test_removed_message_is_one_removed_entry() -> None:
    actual = chat_request()
    del actual["messages"][2]

    entries = structural_diff(chat_request(), actual)

    assert render_diff(entries) == (
        "- messages[2]: {'role': 'assistant', 'content': 'It is sunny in Paris.'}"
    )


def test_insertion_next_to_an_edit_pairs_the_edited_message_with_its_original() -> None:
    actual = chat_request()
    actual["messages"][3]["content"] = "And the day after tomorrow?"
    actual["messages"].insert(3, {"role": "tool", "content": "22C"})

    entries = structural_diff(chat_request(), actual)

    # The edited question is compared with the recorded one, not with the tool message.
    assert render_diff(entries).splitlines() == [
        "+ messages[3]: {'role': 'tool', 'content': '22C'}",
        "~ messages[3].content: 'And tomorrow?' -> 'And the day after tomorrow?'",
    ]


def test_changed_temperature_is_params_changed() -> None:
    actual = chat_request()
    actual["temperature"] = 0.7

    entries = structural_diff(chat_request(), actual)

    assert render_diff(entries) == "~ temperature: 0.2 -> 0.7"
    assert classify("llm", entries) == "params_changed"


def test_changed_tools_and_model_are_params_changed_for_llm() -> None:
    recorded = {**chat_request(), "tools": [{"name": "weather", "description": "Get weather"}]}
    actual = {**recorded, "model": "gpt-4o-mini", "tools": []}

    entries = structural_diff(recorded, actual)

    assert render_diff(entries).splitlines() == [
        "~ model: 'gpt-4o' -> 'gpt-4o-mini'",
        "- tools[0]: {'name': 'weather', 'description': 'Get weather'}",
    ]
    assert classify("llm", entries) == "params_changed"


def test_prompt_key_differences_win_over_parameter_differences() -> None:
    recorded = {"prompt": "Summarise: the cat sat.", "max_tokens": 50}
    actual = {"prompt": "Summarise: the dog sat.", "max_tokens": 80}

    assert classify("llm", structural_diff(recorded, actual)) == "prompt_changed"
    # A bare string request is all prompt.
    assert classify("llm", structural_diff("Hello", "Hi")) == "prompt_changed"


def test_changed_tool_args_are_tool_args_changed() -> None:
    entries = structural_diff({"city": "Paris", "unit": "C"}, {"city": "Lyon", "unit": "C"})

    assert render_diff(entries) == "~ city: 'Paris' -> 'Lyon'"
    assert classify("tool", entries) == "tool_args_changed"
    assert classify("embedding", structural_diff(["a b"], ["a c"])) == "tool_args_changed"
    assert classify("my.search", entries) == "tool_args_changed"


def test_retriever_query_versus_retriever_settings() -> None:
    recorded = {"query": "capital of France", "k": 4}

    query_changed = structural_diff(recorded, {"query": "capital of Italy", "k": 4})
    k_changed = structural_diff(recorded, {"query": "capital of France", "k": 8})

    assert classify("retriever", query_changed) == "tool_args_changed"
    assert classify("retriever", k_changed) == "params_changed"
    assert render_diff(k_changed) == "~ k: 4 -> 8"


def test_a_decision_models_state_and_questions_are_its_prompt() -> None:
    recorded = {"state": "a weekend in Oslo",
                "questions": {"route": {"type": "choice", "instructions": "cheapest"}}}

    state_changed = structural_diff(recorded, {**recorded, "state": "a week in Bergen"})
    asked_otherwise = structural_diff(recorded, {**recorded, "questions": {
        "route": {"type": "choice", "instructions": "fastest"}}})

    assert classify("decision", state_changed) == "prompt_changed"
    assert classify("decision", asked_otherwise) == "prompt_changed"
    assert classify("decision", structural_diff({**recorded, "model": "a"},
                                                {**recorded, "model": "b"})) == "params_changed"


def test_entropy_kinds_classify_as_params_changed() -> None:
    entries = structural_diff({"a": 1, "b": 6}, {"a": 1, "b": 20})

    assert classify("random", entries) == "params_changed"
    assert classify("sleep", structural_diff({"seconds": 1}, {"seconds": 2})) == "params_changed"


def test_classify_never_returns_the_queue_state_classifications() -> None:
    samples = [
        structural_diff(chat_request(), {}),
        structural_diff({"x": 1}, {"x": 2}),
        structural_diff([1], "one"),
        [],
    ]
    kinds = ["llm", "tool", "retriever", "embedding", "time", "random", "uuid", "sleep", "x"]

    results = {classify(kind, entries) for kind in kinds for entries in samples}

    assert results == {"prompt_changed", "params_changed", "tool_args_changed"}
    assert not results & QUEUE_STATE_CLASSIFICATIONS


def test_type_changes_name_both_types() -> None:
    recorded = {"temperature": 0.2, "n": 1, "stop": ("\n",), "when": dt.date(2024, 5, 1)}
    actual = {"temperature": "0.2", "n": 1.0, "stop": ["\n"], "when": dt.datetime(2024, 5, 1)}

    entries = structural_diff(recorded, actual)

    assert [e.op for e in entries] == ["type_changed"] * 4
    assert render_diff(entries).splitlines() == [
        "~ temperature: 0.2 -> '0.2' (float -> str)",
        "~ n: 1 -> 1.0 (int -> float)",
        "~ stop: ('\\n',) -> ['\\n'] (tuple -> list)",
        "~ when: datetime.date(2024, 5, 1) -> datetime.datetime(2024, 5, 1, 0, 0)"
        " (date -> datetime)",
    ]


def test_nested_keys_added_and_removed_with_quoted_paths() -> None:
    recorded: dict[str, Any] = {
        "tools": [{"function": {"parameters": {"properties": {"city": {"type": "string"}}}}}],
        "params": {"weird key": 1, "top_p": 0.9},
    }
    actual = copy.deepcopy(recorded)
    actual["tools"][0]["function"]["parameters"]["properties"]["unit"] = {"enum": ["C", "F"]}
    del actual["params"]["weird key"]

    entries = structural_diff(recorded, actual)

    assert render_diff(entries).splitlines() == [
        "+ tools[0].function.parameters.properties.unit: {'enum': ['C', 'F']}",
        '- params["weird key"]: 1',
    ]
    assert classify("llm", entries) == "params_changed"


def test_long_string_differing_in_the_middle_shows_the_differing_words() -> None:
    filler = " ".join(f"Rule {i}: answer politely and cite sources." for i in range(60))
    recorded = f"{filler} The user lives in Paris and likes rain. {filler}"
    actual = f"{filler} The user lives in Lyon and likes rain. {filler}"

    text = render_diff(structural_diff({"prompt": recorded}, {"prompt": actual}), width=100)

    lines = text.splitlines()
    start = len(filler) + len(" The user lives in ")
    assert lines[0] == (
        f"~ prompt: text differs from index {start}, {len(recorded)} -> {len(actual)} chars:"
    )
    assert "lives in [-Paris-]{+Lyon+} and likes rain." in text
    assert "Rule 0:" not in text  # the unchanged start is elided, not printed
    assert all(len(line) <= 100 for line in lines)


def test_long_string_with_several_changes_shows_each_in_context() -> None:
    words = [f"w{i}" for i in range(300)]
    recorded = " ".join(words)
    words[100], words[200] = "ALPHA", "BETA"
    actual = " ".join(words)

    text = render_diff(structural_diff(recorded, actual))
    head, *body = text.splitlines()
    inline = " ".join(line.strip() for line in body)  # undo the wrapping

    assert "w98 w99 [-w100-]{+ALPHA+} w101 w102" in inline
    assert "w199 [-w200-]{+BETA+} w201" in inline
    assert head.startswith(f"~ $: text differs from index {recorded.index('w100 ')}, ")


def test_heavily_edited_text_shows_the_first_changes_and_counts_the_others() -> None:
    words = [f"w{i}" for i in range(600)]
    recorded = " ".join(words)
    actual = " ".join(f"X{i}" if i % 5 == 0 else word for i, word in enumerate(words))

    lines = render_diff(structural_diff(recorded, actual)).splitlines()

    inline = " ".join(line.strip() for line in lines[1:])
    match = re.search(r"\(\+(\d+) more changes\)$", inline)
    assert match is not None
    shown = inline.count("[-")
    assert shown >= 3
    assert shown + int(match.group(1)) == 120  # every fifth of 600 words
    assert len(lines) <= 7
    assert all(len(line) <= 100 for line in lines)


def test_multiline_text_reports_the_line_and_keeps_one_line_per_row() -> None:
    recorded = "\n".join(f"Step {i}: check the forecast for the region." for i in range(20))
    actual = recorded.replace("Step 12: check", "Step 12: ignore")

    lines = render_diff(structural_diff(recorded, actual)).splitlines()

    start = recorded.index("Step 12: check") + len("Step 12: ")
    assert lines[0].startswith(f"~ $: text differs from index {start} (line 13), ")
    assert "\\nStep 12: [-check-]{+ignore+} the forecast" in lines[1]


def test_truncation_with_many_differences_counts_the_rest() -> None:
    recorded = {"vector": [float(i) for i in range(120)]}
    actual = {"vector": [i + 0.5 for i in range(120)]}

    entries = structural_diff(recorded, actual, max_entries=10)
    lines = render_diff(entries).splitlines()

    assert len(entries) == 10
    assert lines[:2] == ["~ vector[0]: 0.0 -> 0.5", "~ vector[1]: 1.0 -> 1.5"]
    assert lines[-1] == "... and 110 more differences"
    assert len(lines) == 11


def test_long_values_are_truncated_with_an_ellipsis() -> None:
    entries = structural_diff({}, {"documents": [f"document number {i}" for i in range(100)]})

    (line,) = render_diff(entries, width=60).splitlines()

    assert line.startswith("+ documents: ['document number 0', 'document number 1', ")
    assert line.endswith("…")
    assert len(line) == 60


def test_equal_values_have_no_diff() -> None:
    value = {"messages": [{"role": "user", "content": "hi"}], "x": math.nan, "t": (1, 2)}

    assert structural_diff(value, copy.deepcopy(value)) == []
    assert render_diff(structural_diff(value, copy.deepcopy(value))) == ""
    assert render_diff([]) == ""


def test_objects_compare_with_equality_even_when_it_is_elementwise() -> None:
    entries = structural_diff({"v": np.array([1.0, 2.0])}, {"v": np.array([1.0, 2.5])})

    assert render_diff(entries) == "~ v: array([1., 2.]) -> array([1. , 2.5])"
    assert structural_diff({"v": np.array([1.0])}, {"v": np.array([1.0])}) == []


def test_similarity_bounds() -> None:
    request = chat_request()
    edited = chat_request()
    edited["messages"][3]["content"] = "And on Sunday?"

    assert similarity(request, copy.deepcopy(request)) == 1.0
    assert similarity({"a": 1}, {"b": 2}) == 0.0
    assert similarity("Paris", 3) == 0.0
    assert 0.9 < similarity(request, edited) < 1.0
    assert similarity("same words here", "same  words  here") < 1.0
    pairs = [(request, {}), ([], []), ([1, 2], [2, 1]), ("", "x"), (None, None), (1, 1.0)]
    for a, b in pairs:
        assert 0.0 <= similarity(a, b) <= 1.0


def test_similarity_ranks_a_small_edit_above_a_rewrite() -> None:
    base = "Plan a three day trip to Lisbon with museums and food markets. " * 5
    small_edit = base.replace("Lisbon", "Porto", 1)
    rewrite = "Write a haiku about autumn leaves falling on a quiet pond. " * 5

    assert similarity(base, small_edit) > 0.9
    assert similarity(base, rewrite) < 0.5


def test_candidates_rank_same_kind_and_name_first_then_same_kind() -> None:
    actual = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather in Lyon?"}]}
    recorded = [
        (1, "tool", "weather", {"city": "Lyon"}),
        (2, "llm", "gpt-4o", {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}),
        (3, "llm", "claude", {**actual, "model": "claude"}),
        (
            7,
            "llm",
            "gpt-4o",
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather in Paris?"}]},
        ),
    ]

    candidates = nearest_candidates(actual, "llm", "gpt-4o", recorded)

    assert [(c.step, c.kind, c.name) for c in candidates] == [
        (7, "llm", "gpt-4o"),
        (2, "llm", "gpt-4o"),
        (3, "llm", "claude"),
    ]
    assert str(candidates[0]).startswith("step 7 llm 'gpt-4o' (")
    assert str(candidates[0]).endswith("% similar): messages[0].content differs")
    assert str(candidates[2]).endswith(": model differs")
    assert candidates[0].similarity > candidates[1].similarity
    all_of_them = nearest_candidates(actual, "llm", "gpt-4o", recorded, limit=10)
    # the tool step shares nothing with the request: another kind at 0% is noise, left out
    assert [c.step for c in all_of_them] == [7, 2, 3]
    related = [*recorded, (9, "tool", "weather", {"model": "gpt-4o"})]
    with_tool = nearest_candidates(actual, "llm", "gpt-4o", related, limit=10)
    assert [c.step for c in with_tool] == [7, 2, 3, 9]


def test_candidate_string_format() -> None:
    candidate = Candidate(7, "llm", "gpt-4o", 0.8349, "messages[1].content differs")

    assert str(candidate) == "step 7 llm 'gpt-4o' (83% similar): messages[1].content differs"


def test_candidate_summary_counts_further_differences() -> None:
    (candidate,) = nearest_candidates(
        {"a": 1, "b": 2, "c": 3}, "tool", "t", [(4, "tool", "t", {"a": 0, "b": 0, "c": 3})]
    )

    assert candidate.summary == "a differs (+1 more)"


def test_summarize_is_one_bounded_line() -> None:
    value = {"messages": [{"role": "user", "content": "line one\nline two " * 50}]}

    text = summarize(value, width=50)

    assert text == "{'messages': [{'role': 'user', 'content': 'line o…"
    assert summarize("x" * 100, width=10) == "'xxxxxxx…'"
    assert summarize([1, 2, 3]) == "[1, 2, 3]"


def test_replay_divergence_message_carries_the_diff_and_candidates() -> None:
    recorded = chat_request()
    actual = chat_request()
    actual["messages"][1]["content"] = "What is the weather in Lyon?"
    entries = structural_diff(recorded, actual)

    error = ReplayDivergence(
        run_id="0b6c5c1e-run",
        step=2,
        kind="llm",
        name="gpt-4o",
        classification=classify("llm", entries),
        expected=recorded,
        actual=actual,
        diff=render_diff(entries),
        candidates=nearest_candidates(actual, "llm", "gpt-4o", [(2, "llm", "gpt-4o", recorded)]),
    )

    message = str(error)
    assert message.splitlines()[0] == (
        "replay diverged (prompt_changed) in run 0b6c5c1e-run, step 2: llm 'gpt-4o'"
    )
    assert (
        "  ~ messages[1].content: 'What is the weather in Paris?' -> "
        "'What is the weather in Lyon?'" in message
    )
    assert "  step 2 llm 'gpt-4o' (" in message
    assert "similar): messages[1].content differs" in message


@pytest.mark.parametrize("max_entries", [0, -1])
def test_max_entries_must_be_positive(max_entries: int) -> None:
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        structural_diff(1, 2, max_entries=max_entries)
