"""agentreplay for LangChain / LangGraph (being built on the core: see the project issues).

Importing it without langchain-core installed raises an ImportError naming the extra.
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401 - the framework this adapter needs
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'agentreplay_langchain needs langchain-core: pip install "agentreplay[langchain]"'
    ) from exc

__all__: list[str] = []
