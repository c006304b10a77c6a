"""pytest plugin (entry point `pytest11`): record a test's agent calls once, replay them in CI.

Example:
    >>> import pytest
    >>> @pytest.mark.agentreplay
    ... def test_agent(agentreplay):
    ...     answer = agentreplay.call("llm", "chat", {"q": "hi"}, lambda: "live answer")
    ...     assert answer

`agentreplay` (the fixture) is an open `Session`, active for the test (`active_session()`
returns it, so adapters' `instrument()` and `replayable_*` factories use it). Marked tests get
it without asking. Each test's recording is `<test dir>/agentreplay/<test id>.jsonl`, one JSON
object per line. `--agentreplay-mode` (else the ini option `agentreplay_mode`, else `none`):

- `none`: replay only (network guard on); a missing recording fails, saying how to record it;
- `once`: replay the recording, or record it when there is none;
- `new_episodes`: replay, and from the first call the recording lacks, call live; the file is
  then rewritten with what the test did (recorded steps it no longer asked for are dropped);
- `all`: record again.

A recording is written only when the test passes: a failing test leaves the previous file
alone (its partial recording stays in the temporary directory the summary names).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pytest

from agentreplay_core import _cassette as cassette
from agentreplay_core._cassette import Plan, RecordMode
from agentreplay_core._plural import counted

if TYPE_CHECKING:
    from agentreplay_core._session import Session

_MODE = pytest.StashKey[RecordMode]()
_SUMMARY = pytest.StashKey[list[str]]()
_RECORDING = pytest.StashKey["_TestRecording"]()
_PASSED = pytest.StashKey[bool]()
_MARKER_HELP = (
    "agentreplay(name=None, **options): record or replay the test's agent calls (see "
    "--agentreplay-mode); name: the recording's file name; options: entropy, metadata, tags "
    "(recording), match, allow_unused, verify, allow_hosts, check_secrets (replay)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentreplay", "agentreplay record/replay")
    group.addoption(
        "--agentreplay-mode", dest="agentreplay_mode", default=None,
        choices=cassette.MODE_NAMES,
        help="none (replay only; the default), once (record missing recordings), "
             "new_episodes (record calls the recordings lack), all (record everything again)."
             " Overrides the agentreplay_mode ini option.")
    parser.addini("agentreplay_mode", "default for --agentreplay-mode", default="none")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    raw = config.getoption("agentreplay_mode", None) or config.getini("agentreplay_mode")
    try:
        config.stash[_MODE] = RecordMode.parse(str(raw or "none"))
    except ValueError as exc:
        raise pytest.UsageError(f"agentreplay_mode ini option: {exc}") from None
    config.stash[_SUMMARY] = []


def pytest_report_header(config: pytest.Config) -> str | None:
    mode = config.stash.get(_MODE, RecordMode.NONE)
    if mode == RecordMode.NONE:
        return None  # the default says nothing, so suites that do not use it look the same
    return (f"agentreplay: --agentreplay-mode={mode.value}: tests may call live services and "
            "write recordings")


@pytest.fixture(autouse=True)
def _agentreplay_marker(request: pytest.FixtureRequest) -> None:
    """Give tests marked `@pytest.mark.agentreplay` the session, as vcrpy's marker does."""
    if request.node.get_closest_marker("agentreplay") is not None:
        request.getfixturevalue("agentreplay")


@pytest.fixture
def agentreplay(request: pytest.FixtureRequest) -> Iterator[Session]:
    """The test's agentreplay `Session`: recording or replaying `<test dir>/agentreplay/...`."""
    recording = _TestRecording(request)
    request.node.stash[_RECORDING] = recording
    try:
        yield recording.session
    finally:
        del request.node.stash[_RECORDING]
        recording.finish(request.node.stash.get(_PASSED, False))


# Old-style wrappers (`hookwrapper=True`): the plugin loads in every pytest of an environment
# where agentreplay is installed, including pytest 7 with a pluggy that has no `wrapper=True`.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    # Checks after a passing test fail the test itself, not its teardown.
    outcome = yield
    recording = item.stash.get(_RECORDING, None)
    if recording is not None and outcome.excinfo is None:
        problem = recording.problem_after_test()
        if problem:
            outcome.force_exception(pytest.fail.Exception(problem, pytrace=False))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    if call.excinfo is not None and call.when == "call" and _RECORDING in item.stash \
            and not item.config.getoption("fulltrace", False):
        _hide_own_frames(call.excinfo)
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    recording = item.stash.get(_RECORDING, None)
    if report.when == "call" and recording is not None:
        item.stash[_PASSED] = report.passed
        from agentreplay_core._errors import ReplayDivergence

        if call.excinfo is not None and recording.session.player is not None \
                and isinstance(call.excinfo.value, ReplayDivergence):
            report.sections.append(("agentreplay", recording.divergence_hint()))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("agentreplay")
        for line in lines:
            terminalreporter.line(line)


def _hide_own_frames(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Show an agentreplay error (a divergence) at the caller's line, not deep in our code:
    the traceback is cut where it enters agentreplay (`--full-trace` keeps it whole)."""
    from agentreplay_core._errors import AgentReplayError

    if not isinstance(excinfo.value, AgentReplayError):
        return
    own = tuple(str(Path(m.__file__).parent) for name in (
        "agentreplay_core", "agentreplay_langchain", "agentreplay_llamaindex")
        if (m := sys.modules.get(name)) is not None and m.__file__)
    previous: TracebackType | None = None
    tb: TracebackType | None = excinfo.tb
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(own) and filename != __file__:  # our hooks run the test
            if previous is not None:
                previous.tb_next = None  # pytest rebuilds what it shows from the raw frames
                excinfo.traceback = excinfo.traceback.filter(
                    lambda entry: not str(entry.path).startswith(own))
            return
        previous, tb = tb, tb.tb_next


class _TestRecording:
    """One test's recording: the open session, and what happens to the file at the end."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        from agentreplay_core._session import Session
        from agentreplay_core.stores._open import open_store

        config = request.config
        self.nodeid: str = request.node.nodeid
        self.mode = config.stash.get(_MODE, RecordMode.NONE)
        self.summary = config.stash.get(_SUMMARY, [])
        self.root = Path(config.rootpath)
        marker = request.node.get_closest_marker("agentreplay")
        try:
            options = (cassette.marker_options(marker.args, marker.kwargs) if marker
                       else cassette.MarkerOptions())
            self.path = cassette.cassette_path(Path(request.node.path), self.nodeid,
                                               options.name)
        except ValueError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.plan = cassette.plan(self.mode, self.path.is_file())
        if self.plan == Plan.MISSING:
            pytest.fail(cassette.missing_message(self.nodeid, self.path, self.root),
                        pytrace=False)
        self.allow_unused = bool(options.replay.get("allow_unused"))
        self.workdir: Path | None = None
        if self.plan == Plan.RECORD:
            self.workdir = Path(tempfile.mkdtemp(prefix="agentreplay-pytest-"))
            record = dict(options.record)
            record["metadata"] = {**record.get("metadata", {}), "pytest": self.nodeid}
            self.session = Session(
                "record", open_store(f"file:{self.workdir / 'recording.jsonl'}"),
                name=self.nodeid, close_store=True, **record)
        else:
            run_id = self._recorded_run_id(open_store)
            store_url = f"file:{self.path}"
            replay = dict(options.replay)
            if self.plan == Plan.EXTEND:  # the fork is recorded beside a copy, never into it
                self.workdir = Path(tempfile.mkdtemp(prefix="agentreplay-pytest-"))
                shutil.copyfile(self.path, self.workdir / f"{run_id}.jsonl")
                store_url, replay["on_divergence"] = f"file:{self.workdir}", "live"
            self.session = Session("replay", open_store(store_url), run_id=run_id,
                                   replay_options=replay, close_store=True)
        try:
            self.session.__enter__()
        except BaseException:
            self._clean()
            raise

    def _recorded_run_id(self, open_store: Any) -> str:
        try:
            with open_store(f"file:{self.path}") as store:
                return str(store.list_runs(limit=1)[0].run_id)
        except Exception as exc:  # a damaged or foreign file: say which and what to do
            again = cassette.record_command(self.nodeid, RecordMode.ALL)
            pytest.fail(f"agentreplay: cannot read the recording {self.path}: {exc}\n"
                        f"Record it again with `{again}`", pytrace=False)

    def problem_after_test(self) -> str | None:
        """What fails a test that passed: recorded steps it never asked for, values that
        could not be recorded."""
        session = self.session
        if session.recorder is not None and session.recorder.stats.unencodable:
            values = counted(session.recorder.stats.unencodable, "value")
            return (f"agentreplay: {values} of this test could not be encoded, so its recording "
                    "would not replay (the log names them; register_type() teaches the codec "
                    "new types)")
        player = session.player
        if player is None or player.fork is not None or self.allow_unused:
            return None
        try:
            player.check_all_consumed()
        except Exception as exc:  # ReplayDivergence naming the steps, or one the test caught
            hint = cassette.unused_hint(self.nodeid) if player.diverged is None \
                else self.divergence_hint()
            return f"{exc}\n{hint}"
        return None

    def divergence_hint(self) -> str:
        """What to do when the test no longer makes the recorded calls."""
        return (f"The test's calls differ from its recording "
                f"{cassette.shown(self.path, self.root)}. If the change is intended, record it "
                "again:\n"
                f"    {cassette.record_command(self.nodeid, RecordMode.ALL)}\n"
                "or keep what matches and record only the new calls with "
                "--agentreplay-mode=new_episodes.")

    def finish(self, passed: bool) -> None:
        """Close the session; write the recording if the test passed and it is whole."""
        session = self.session
        recorder, player = session.recorder, session.player
        if passed:
            session.__exit__(None, None, None)
        else:
            failed = _TestDidNotPass(f"test {self.nodeid} did not pass")
            session.__exit__(type(failed), failed, None)
        shown = cassette.shown(self.path, self.root)
        if self.plan == Plan.REPLAY:
            return
        if not passed:
            if self.plan == Plan.RECORD or (player is not None and player.fork is not None):
                self.summary.append(f"not saved (the test did not pass): {shown}; the partial "
                                    f"recording is in {self.workdir}")
            else:
                self._clean()
            return
        if recorder is not None:
            stats = recorder.stats
            if stats.spooled or stats.lost or stats.pending or stats.internal_errors:
                self.summary.append(f"not saved (recording incomplete: {stats}): {shown}; "
                                    f"see {self.workdir}")
                return
            self._install(Path(f"{self.workdir}/recording.jsonl"))
            self.summary.append(f"recorded {shown} ({counted(stats.steps, 'step')})")
        elif player is not None and player.fork is not None:
            fork = player.fork
            self._install(Path(f"{self.workdir}/{fork.run_id}.jsonl"))
            dropped = len(player.unconsumed())
            note = f", {counted(dropped, 'recorded step')} it no longer asked for dropped" \
                if dropped else ""
            steps = counted(fork.step_count, "step")
            self.summary.append(f"rewrote {shown} with new calls ({steps}{note})")
        self._clean()

    def _install(self, source: Path) -> None:
        """Put `source` in place of the recording in one step (readers never see half)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.partial")
        shutil.copyfile(source, partial)
        partial.replace(self.path)

    def _clean(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


class _TestDidNotPass(Exception):
    """Ends the session of a test that failed, so a recording is sealed `failed`."""
