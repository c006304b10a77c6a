"""Notes: what a recorded call does to a shared object, noted in its own context."""

from __future__ import annotations

import contextvars

from agentreplay_core._noting import Notes


def test_a_call_inside_another_notes_for_both_in_order() -> None:
    notes: Notes[str] = Notes("test_nested_notes")
    outer = notes.start()
    assert notes.current is not None
    notes.current.append("outer before")
    inner = notes.start()
    assert notes.current == []
    notes.current.append("inner")
    assert notes.stop(inner) == ["inner"]
    assert notes.current is not None
    notes.current.append("outer after")
    assert notes.stop(outer) == ["outer before", "inner", "outer after"]
    assert notes.current is None


def test_a_paused_part_and_calls_outside_note_nothing_for_the_call() -> None:
    notes: Notes[str] = Notes("test_paused_notes")
    outside = contextvars.copy_context()  # a task started before the call
    outer = notes.start()
    inside = contextvars.copy_context()  # a task the call started: part of the call
    paused = notes.pause()
    inner = notes.start()  # a call inside the paused part: its own effects only
    assert notes.current is not None
    notes.current.append("inside the pause")
    assert notes.stop(inner) == ["inside the pause"]
    notes.resume(paused)

    def call(name: str) -> None:
        token = notes.start()
        assert notes.current is not None
        notes.current.append(name)
        assert notes.stop(token) == [name]

    outside.run(call, "outside")
    inside.run(call, "spawned")
    assert notes.stop(outer) == ["spawned"]
