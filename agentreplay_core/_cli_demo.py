"""`agentreplay demo`: a LangChain RAG agent recorded into the run store and replayed.

The demo itself lives in the LangChain adapter; it is imported only when the command runs, so
the core never imports LangChain.
"""

from __future__ import annotations

import importlib.util
import time

import typer

from agentreplay_core._cli_app import (
    DsnOption,
    SchemaOption,
    app,
    console,
    err,
    fail,
    open_cli_store,
)
from agentreplay_core._errors import AgentReplayError

_INSTALL_HINT = 'pip install "agentreplay[demo]"'


@app.command()
def demo(dsn: DsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Record a small LangChain RAG agent, replay it twice, compare, verify, change a prompt.

    Exit 0 when both replays equal the live run, the run verifies and the changed prompt is
    caught; 1 otherwise.
    """
    missing = [package for module, package in (("langchain_core", "langchain-core"),
                                                ("numpy", "numpy"))
               if importlib.util.find_spec(module) is None]
    if missing:  # numpy: the demo's in-memory vector store computes similarities with it
        raise fail(f"agentreplay demo runs a LangChain agent with an in-memory vector store, "
                   f"and {' and '.join(missing)} is not installed", _INSTALL_HINT)
    started = time.perf_counter()
    with err.status("Loading LangChain..."):
        from agentreplay_langchain._demo_view import Timings, run_demo
    timings = Timings()
    timings.phases.append(("load LangChain", time.perf_counter() - started))
    try:
        with timings("open the run store"):
            store = open_cli_store(dsn, schema, create=True)
        with store:
            ok = run_demo(store, console, timings)
    except AgentReplayError as exc:
        raise fail(str(exc)) from None
    raise typer.Exit(0 if ok else 1)
