"""`loaded_step` builds exactly what pydantic's `model_construct` builds, for less."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from agentreplay_core import Step
from agentreplay_core._model import loaded_step


def test_loaded_step_is_the_model_construct_instance() -> None:
    values: dict[str, Any] = {
        "run_id": uuid.uuid4(), "step": 3, "kind": "llm", "name": "chat_model",
        "match_key": "ab" * 16, "path": "chat_model:chat_model",
        "input": {"messages": [1, 2.5, None]}, "output": ["x"], "is_error": True,
        "started_at": datetime(2026, 1, 2, tzinfo=timezone.utc), "duration_ms": 1.5,
        "checksum": "cd" * 32,
    }
    fast = loaded_step(*values.values())
    built = Step.model_construct(**values)
    assert fast == built
    assert fast.model_dump() == built.model_dump() == values
    assert fast.model_dump_json() == built.model_dump_json()
    assert repr(fast) == repr(built)
    assert fast.model_fields_set == built.model_fields_set
    copied = fast.model_copy(update={"step": 4})
    assert (copied.step, fast.step) == (4, 3)
    fast.output = "changed"  # steps are mutable like any model_construct instance
    assert fast.output == "changed" and built.output == ["x"]
    assert Step.model_validate(fast.model_dump()).output == "changed"
