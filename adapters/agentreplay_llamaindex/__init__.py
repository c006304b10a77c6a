"""agentreplay for LlamaIndex (being built on the core: see the project issues).

Importing it without llama-index-core installed raises an ImportError naming the extra.
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401 - the framework this adapter needs
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'agentreplay_llamaindex needs llama-index-core: pip install "agentreplay[llamaindex]"'
    ) from exc

__all__: list[str] = []
