"""`RunStore`: the protocol every run store satisfies (DESIGN section 2)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from agentreplay_core._integrity import VerifyReport
from agentreplay_core._model import EmbeddingMatch, Run, Step
from agentreplay_core._player import Player
from agentreplay_core._recorder import Recorder


@runtime_checkable
class RunStore(Protocol):
    def record(self, name: str | None = None, **options: Any
               ) -> contextlib.AbstractContextManager[Recorder]: ...

    def replay(self, run_id: UUID | str, **options: Any
               ) -> contextlib.AbstractContextManager[Player]: ...

    def verify(self, run_id: UUID | str) -> VerifyReport: ...

    def get_run(self, run_id: UUID | str) -> Run: ...

    def list_runs(self, **filters: Any) -> list[Run]: ...

    def load_steps(self, run_id: UUID | str) -> list[Step]: ...

    def search_embeddings(self, vector: Sequence[float], limit: int = 10
                          ) -> list[EmbeddingMatch]: ...

    def flush_spool(self) -> dict[UUID, int]: ...

    def close(self) -> None: ...
