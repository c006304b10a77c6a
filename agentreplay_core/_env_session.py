"""The session the environment asks for, so an agent's code needs no change to be recorded or
replayed (`AGENTREPLAY_MODE=record|replay|off`).

Variables:
    AGENTREPLAY_MODE          record, replay or off (unset: off)
    AGENTREPLAY_RUN_ID        the run to replay; when recording, the id the new run gets
    AGENTREPLAY_DSN           the run store (default: the embedded PostgreSQL)
    AGENTREPLAY_SCHEMA        its PostgreSQL schema
    AGENTREPLAY_RUN_NAME      the recorded run's name (default: the script's name)
    AGENTREPLAY_TAGS          comma-separated tags for the recorded run
    AGENTREPLAY_ENTROPY       1 to also record the clock, randomness and ids
    AGENTREPLAY_ON_DIVERGENCE raise (default) or live (fork into a live run)
    AGENTREPLAY_CHECK_SECRETS 0 to let recorded placeholders match any text (read by
                              `Store.replay`: no redaction key needed)
    AGENTREPLAY_REPORT_FILE   where to write how the session ended, as JSON: mode, run_id,
                              ok, error, steps, fork_run_id (`agentreplay replay RUN -- CMD`
                              reads it and says what went wrong)

The session opens at the first call that asks for it and ends at interpreter exit: a recording
is sealed `complete`, or `failed` when the program died of an uncaught exception; a replay
checks that every recorded step was asked for. A recording that cannot start (the database is
unreachable, or AGENTREPLAY_RUN_ID names a run that exists) must not break the program: it runs
unrecorded and says so on stderr. A replay that cannot start raises, since going live silently is
what replay must never do; so does a call to a replay that already ended (in a later exit
handler).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from agentreplay_core._errors import AgentReplayError
from agentreplay_core._session import Mode, Session
from agentreplay_core._store import Store

log = logging.getLogger("agentreplay")

_lock = threading.Lock()
#: (pid, session): a forked child must not reuse its parent's recorder or player
_cached: tuple[int, Session | None] | None = None
_uncaught: BaseException | None = None


def session_from_env(environ: Mapping[str, str] | None = None) -> Session | None:
    """A (not yet opened) session as the environment describes it; None when mode is off."""
    env = os.environ if environ is None else environ
    mode = Mode.parse(env.get("AGENTREPLAY_MODE") or "off")
    if mode == Mode.OFF:
        return None
    run_id = env.get("AGENTREPLAY_RUN_ID") or None
    if mode == Mode.REPLAY and not run_id:
        raise AgentReplayError("AGENTREPLAY_MODE=replay needs AGENTREPLAY_RUN_ID (the run to "
                               "replay; `agentreplay runs` lists them)")
    on_divergence = (env.get("AGENTREPLAY_ON_DIVERGENCE") or "raise").strip().lower()
    if on_divergence not in ("raise", "live"):
        raise AgentReplayError(f"AGENTREPLAY_ON_DIVERGENCE={on_divergence!r}: use raise or live")
    store = _open_env_store(env)
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python"
    return Session(
        mode, store, run_id=run_id, close_store=True, instrument=False,
        name=env.get("AGENTREPLAY_RUN_NAME") or script,
        tags=[t.strip() for t in (env.get("AGENTREPLAY_TAGS") or "").split(",") if t.strip()],
        entropy=(env.get("AGENTREPLAY_ENTROPY") or "").strip().lower() in ("1", "true", "yes"),
        replay_options={"on_divergence": on_divergence},
    )


def _open_env_store(env: Mapping[str, str]) -> Store:
    """The store `env` names (its DSN, schema and pooler, not necessarily `os.environ`'s)."""
    from agentreplay_core.stores._open import names_postgres, open_store

    url = env.get("AGENTREPLAY_DSN") or None
    if url is None:
        from agentreplay_core.stores._embedded import embedded_dsn

        url = embedded_dsn()
    if names_postgres(url):
        return open_store(url, schema=env.get("AGENTREPLAY_SCHEMA") or "agentreplay",
                          pooler=env.get("AGENTREPLAY_POOLER"))
    return open_store(url)


def env_session() -> Session | None:
    """The open process-wide session of `AGENTREPLAY_MODE`, opened at the first call."""
    global _cached
    cached = _cached
    if cached is not None and cached[0] == os.getpid():
        return cached[1]
    with _lock:
        if _cached is not None and _cached[0] == os.getpid():
            return _cached[1]
        if cached is not None:  # a forked child: its parent's session is not its own
            _cached = (os.getpid(), None)
            return None
        session = _open_from_env()
        _cached = (os.getpid(), session)
        return session


def _open_from_env() -> Session | None:
    mode = (os.environ.get("AGENTREPLAY_MODE") or "off").strip().lower()
    try:
        session = session_from_env()
        if session is None:
            return None
        session.open()
    except Exception as exc:
        if mode != Mode.RECORD.value:
            _write_report({"mode": mode, "ok": False, "error": str(exc)})
            raise
        # recording must never break the program it records
        print(f"agentreplay: not recording ({exc})", file=sys.stderr)
        # stderr says it already; logging would print it a second time unconfigured
        log.info("agentreplay: AGENTREPLAY_MODE=record could not start: %s", exc)
        return None
    verb = "recording" if session.mode == Mode.RECORD else "replaying"
    assert session.store is not None
    print(f"agentreplay: {verb} run {session.run_id} ({session.store.backend.description})",
          file=sys.stderr)
    _watch_uncaught()
    atexit.register(_close_at_exit, session)
    return session


def _watch_uncaught() -> None:
    """Note the exception that kills the program, so the recording is sealed `failed`."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        global _uncaught
        _uncaught = exc
        previous(kind, exc, tb)

    sys.excepthook = hook


def _close_at_exit(session: Session) -> None:
    global _cached
    report: dict[str, Any] = {"mode": session.mode.value, "run_id": str(session.run_id)}
    player, recorder = session.player, session.recorder
    try:
        session.close(_uncaught)
        report["ok"] = _uncaught is None
        if _uncaught is not None:
            report["error"] = f"{type(_uncaught).__name__}: {_uncaught}"
    except Exception as exc:  # e.g. recorded steps never asked for: say it, do not crash exit
        report.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        if not os.environ.get("AGENTREPLAY_REPORT_FILE"):  # else its reader says it
            print(f"agentreplay: replay of run {session.run_id} did not finish cleanly: {exc}",
                  file=sys.stderr)
    if recorder is not None:
        report["steps"] = recorder.stats.steps
        # calls from later exit handlers run unrecorded rather than fail on a sealed run
        _cached = (os.getpid(), None)
    if player is not None:
        report["steps"] = len(player.consumed())
        if player.fork is not None:
            report["fork_run_id"] = str(player.fork.run_id)
    _write_report(report)


def _write_report(report: dict[str, Any]) -> None:
    path = os.environ.get("AGENTREPLAY_REPORT_FILE")
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(report), encoding="utf-8")
    except OSError as exc:
        log.warning("agentreplay: could not write the session report %s: %s", path, exc)

