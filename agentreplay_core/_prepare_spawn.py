"""Starting the helper process of `prepare="process"` (`_prepare_client` talks to it)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys

try:
    import fcntl
except ImportError:  # Windows: no helper process there anyway
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("agentreplay")


def start_helper() -> subprocess.Popen[bytes] | None:
    """The helper process, with non-blocking pipes to and from it; None (and a warning) where
    it cannot run."""
    if os.name != "posix":  # the pipes are read with select(), which Windows lacks for them
        log.warning("agentreplay: prepare=\"process\" needs a POSIX system; steps are prepared "
                    "in this process")
        return None
    if not sys.executable or getattr(sys, "frozen", False):
        # a frozen application's executable is the application itself, not a Python
        log.warning("agentreplay: prepare=\"process\" found no Python executable to run the "
                    "helper with (sys.executable is %r%s); steps are prepared in this process",
                    sys.executable, ", a frozen application" if getattr(sys, "frozen", False)
                    else "")
        return None
    env = dict(os.environ)
    # the helper imports agentreplay from where this process does
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentreplay_core._prepare_helper"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
            # its own session: the terminal's Ctrl-C is for the agent, not for the helper
            start_new_session=True)
    except OSError as exc:
        log.warning("agentreplay: could not start the prepare helper process (%s); steps are "
                    "prepared in this process", exc)
        return None
    assert process.stdin is not None and process.stdout is not None
    for pipe in (process.stdin, process.stdout):
        os.set_blocking(pipe.fileno(), False)
        _widen(pipe.fileno())
    return process


#: Linux's fcntl that resizes a pipe (None elsewhere)
_F_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)


def _widen(fd: int) -> None:
    """A pipe of 1 MiB where Linux allows it (64 KiB by default): a batch then goes through
    in one write and one read instead of a dozen, and each of those hands the GIL over to
    the agent's thread and must wait to get it back."""
    if _F_SETPIPE_SZ is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
