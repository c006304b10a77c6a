"""`agentreplay replay RUN -- CMD...`: run a program against a recorded run, offline.

The run is exported to a temporary single-run JSONL file, and CMD runs with
`AGENTREPLAY_MODE=replay`, `AGENTREPLAY_RUN_ID` and `AGENTREPLAY_DSN=file:<that file>` in its
environment, so the program's `active_session()` replays it with no database to reach. Where
`unshare` permits, CMD runs in a new network namespace: no network at all but its own loopback,
for the whole process. Otherwise only the in-process guard of the replay refuses connections,
from the program's first agentreplay call on. Afterwards the session's report (a JSON file
named by `AGENTREPLAY_REPORT_FILE`) says whether the replay finished cleanly.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from agentreplay_core._cli_app import (
    AcceptUnkeyedOption,
    DsnOption,
    SchemaOption,
    app,
    err,
    fail,
    open_cli_store,
)
from agentreplay_core._cli_common import cli_errors
from agentreplay_core._cli_table import visible
from agentreplay_core._plural import counted
from agentreplay_core.stores._open import ACCEPT_UNKEYED_ENV

#: how the session's report names recorded steps the program never asked for
_UNUSED = "ReplayDivergence: replay diverged (missing_call)"

#: run first inside the namespace: bring its loopback up (so CMD's own local servers work),
#: then become CMD. Plain code with no imports of ours, so it costs no more than `python -c`.
_INSIDE = """\
import fcntl, os, socket, struct, sys
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40))
except OSError:
    pass
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    sys.stderr.write(f"agentreplay: cannot run {sys.argv[1]}: {exc.strerror}\\n")
    sys.exit(127)
"""
#: how `unshare` may make a network namespace: as root, else inside a new user namespace
_UNSHARE_FLAGS = (("--net",), ("--user", "--map-root-user", "--net"))


class Isolation(str, enum.Enum):
    AUTO = "auto"
    NAMESPACE = "namespace"
    GUARD = "guard"


@dataclass(frozen=True)
class Sandbox:
    """How CMD is kept off the network: the command prefix (empty: none) and what to say."""

    prefix: tuple[str, ...]
    description: str


def network_namespace() -> Sandbox | str:
    """The `unshare` invocation that gives CMD a network namespace here, or why there is none."""
    if not sys.platform.startswith("linux"):
        return "network namespaces exist on Linux only"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "`unshare` (util-linux) is not installed"
    why = []
    for flags in _UNSHARE_FLAGS:
        try:
            probe = subprocess.run([unshare, *flags, "--", sys.executable, "-c", ""],
                                   capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why.append(f"`unshare {' '.join(flags)}`: {exc}")
            continue
        if probe.returncode == 0:
            return Sandbox((unshare, *flags, "--", sys.executable, "-c", _INSIDE),
                           f"in a new network namespace (unshare {' '.join(flags)}): no "
                           "network access but its own loopback")
        said = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        why.append(f"`unshare {' '.join(flags)}`: {said}")
    return "; ".join(why)


def _sandbox(isolation: Isolation) -> Sandbox:
    if isolation == Isolation.GUARD:
        return Sandbox((), "with the in-process network guard only (--isolation guard)")
    found = network_namespace()
    if isinstance(found, Sandbox):
        return found
    if isolation == Isolation.NAMESPACE:
        raise fail(f"no network namespace for the replay: {found}",
                   "run as root, allow unprivileged user namespaces, or use --isolation auto")
    return Sandbox((), f"with the in-process network guard only, from the program's first "
                       f"agentreplay call on (no network namespace: {found})")


def _read_report(path: Path) -> dict[str, Any] | None:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


@app.command("replay", help=(
    "Run CMD against a recorded run, with no network.\n\n"
    "CMD gets AGENTREPLAY_MODE=replay, AGENTREPLAY_RUN_ID and AGENTREPLAY_DSN (a temporary "
    "export of the run, so no database is needed) in its environment: agent code that asks "
    "agentreplay (active_session(), the adapters' instrument() and replayable models) is "
    "served the recording. It runs in a new network namespace when `unshare` permits, else "
    "with the in-process network guard only; the first line printed says which.\n\n"
    "Exit codes: CMD's own when it fails; 1 when CMD exits 0 but the replay did not finish "
    "cleanly (recorded steps never asked for, unless --allow-unused) or the run fails "
    "verification; 2 unknown run, "
    "usage or store error."))
def replay_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id, or a unique prefix.")],
    command: Annotated[list[str] | None, typer.Argument(
        metavar="CMD", help="The program to run and its arguments, after `--`.",
        show_default=False)] = None,
    isolation: Annotated[Isolation, typer.Option(
        "--isolation", case_sensitive=False,
        help="namespace: require a network namespace; guard: in-process guard only; auto: "
             "a namespace where possible.")] = Isolation.AUTO,
    no_check_secrets: Annotated[bool, typer.Option(
        "--no-check-secrets",
        help="Let the recording's placeholders (<secret:...>) match any text, for a machine "
             "without the redaction key the run was recorded with (sets "
             "AGENTREPLAY_CHECK_SECRETS=0).")] = False,
    allow_unused: Annotated[bool, typer.Option(
        "--allow-unused",
        help="Finish cleanly (exit 0) when the program stops before asking for every "
             "recorded step.")] = False,
    accept_unkeyed: AcceptUnkeyedOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Run a program with the recorded run served to it, offline."""
    from agentreplay_core._transfer import export_run

    if not command:
        raise fail("name the program to run after `--`",
                   "agentreplay replay RUN -- python agent.py")
    with tempfile.TemporaryDirectory(prefix="agentreplay-replay-") as tmp:
        export, report_file = Path(tmp) / "run.jsonl", Path(tmp) / "report.json"
        with cli_errors(), open_cli_store(dsn, schema, accept_unkeyed=accept_unkeyed) as store:
            run = store.get_run(run_id)
            exported = export_run(store, run.run_id, export)
        if not exported.report.ok:
            _say(f"error: run {run.run_id} fails verification; not replaying it:\n"
                 f"{exported.report}", "red")
            raise typer.Exit(1)
        sandbox = _sandbox(isolation)
        env = {**os.environ, "AGENTREPLAY_MODE": "replay", "AGENTREPLAY_RUN_ID": str(run.run_id),
               "AGENTREPLAY_DSN": f"file:{export}", "AGENTREPLAY_REPORT_FILE": str(report_file),
               # a live fork could neither reach anything nor be stored in the export
               "AGENTREPLAY_ON_DIVERGENCE": "raise"}
        env.pop("AGENTREPLAY_SCHEMA", None)
        if no_check_secrets:
            env["AGENTREPLAY_CHECK_SECRETS"] = "0"
        if accept_unkeyed:  # the program's own store verifies the exported run again
            env[ACCEPT_UNKEYED_ENV] = "1"
        unchecked = "; its placeholders match any text" if no_check_secrets else ""
        _say(f"agentreplay: replaying run {run.run_id} ({counted(exported.steps, 'step')}) "
             f"{sandbox.description}{unchecked}")
        try:
            code = subprocess.run([*sandbox.prefix, *command], env=env).returncode
        except OSError as exc:
            raise fail(f"cannot run {command[0]}: {exc.strerror or exc}", code=127) from None
        report = _read_report(report_file)
    raise typer.Exit(_verdict(str(run.run_id), exported.steps, code, report,
                              allow_unused=allow_unused))


def _verdict(run_id: str, steps: int, code: int, report: dict[str, Any] | None, *,
             allow_unused: bool = False) -> int:
    """Say how the replay ended; the exit code."""
    if code < 0:  # killed by a signal, as a shell reports it
        code = 128 - code
    error = str(report.get("error") or "") if report else ""
    if code != 0:  # the program has shown its error; one line of it says which run it was
        why = f": {error.splitlines()[0]}" if error else ""
        _say(f"agentreplay: the program exited with code {code} replaying run {run_id}{why}",
             "red")
        return code
    if report is None:
        if steps == 0:
            _say(f"agentreplay: replay of run {run_id} (no steps) finished")
            return 0
        _say(f"agentreplay: the program exited 0 but never asked agentreplay for a recorded "
             f"result, so none of the {steps} recorded steps of run {run_id} was replayed "
             "(agent code asks through active_session() or the adapters)", "red")
        return 1
    if not report.get("ok") and allow_unused and error.startswith(_UNUSED):
        used = report.get("steps")
        of = f"{used} of {steps}" if isinstance(used, int) else f"some of the {steps}"
        _say(f"agentreplay: replay of run {run_id} finished: the program asked for {of} "
             "recorded steps; the rest are allowed unused (--allow-unused)", "green")
        return 0
    if not report.get("ok"):
        # the library's hint names its Python keyword; here the option is what can be passed
        said = error.replace("pass allow_unused=True", "pass --allow-unused")
        _say(f"agentreplay: replay of run {run_id} did not finish cleanly: "
             f"{said or 'no reason given'}", "red")
        return 1
    _say(f"agentreplay: replay of run {run_id} finished cleanly", "green")
    return 0


def _say(message: str, style: str = "") -> None:
    """A line on stderr; a recorded error quoted in it may hold control characters."""
    lines = message.splitlines() or [""]
    err.print("\n".join(visible(line) for line in lines), style=style, markup=False,
              highlight=False, soft_wrap=True)
