"""The pytest plugin as a user's test suite meets it: record modes, files, failures.

Each test writes a small test module with `pytester` and runs pytest on it; the plugin comes in
through its `pytest11` entry point, as in a user's environment. The inner tests call functions
returning random numbers through the `agentreplay` fixture and append what they got to
`values.jsonl`, so a replay that serves the recording shows the recorded numbers again.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

# In-process pytester runs drop the modules first imported inside them, but the package keeps
# the names it imported lazily: a second run would get a new `_session` (and active session)
# beside the package's old `active_session`. Imported here, it is one module for all runs.
import agentreplay_core._session  # noqa: F401
from agentreplay_core import open_store
from agentreplay_core._cassette import (
    Plan,
    RecordMode,
    cassette_name,
    cassette_path,
    marker_options,
    plan,
)

pytest_plugins = ["pytester"]

HEADER = """
import json, random
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import active_session


def keep(values):
    with Path("values.jsonl").open("a") as out:
        out.write(json.dumps(values) + "\\n")
"""


def agent_test(calls: list[int], *, marker: str = "@pytest.mark.agentreplay", tail: str = "",
               name: str = "test_agent") -> str:
    """An inner test making one `tool rand` call per entry of `calls` (the request's `i`)."""
    body = "".join(f"    values.append(agentreplay.call('tool', 'rand', {{'i': {i}}}, "
                   "random.random))\n" for i in calls)
    return f"\n{marker}\ndef {name}(agentreplay):\n    values = []\n{body}    keep(values)\n" \
        f"{tail}"


def write(pytester: pytest.Pytester, *tests: str) -> None:
    pytester.makepyfile(test_flow=HEADER + "\n".join(tests))


@pytest.fixture(autouse=True)
def _only_our_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Loading every installed plugin costs a second a run; the first test below proves that
    # the entry point loads ours, the others name it.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # where the plugin's temporary recordings go (kept for failed tests)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def run(pytester: pytest.Pytester, *args: str, autoload: bool = False) -> pytest.RunResult:
    if autoload:
        return pytester.runpytest("-p", "no:cacheprovider", "-o",
                                  "asyncio_default_fixture_loop_scope=function", *args)
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "agentreplay_core.pytest_plugin",
                              *args)


def values(pytester: pytest.Pytester) -> list[list[Any]]:
    path = pytester.path / "values.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def recording(pytester: pytest.Pytester, name: str = "test_agent") -> Path:
    return pytester.path / "agentreplay" / f"{name}.jsonl"


def test_missing_recording_fails_in_none_mode_saying_how_to_record(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    write(pytester, agent_test([1]))
    result = run(pytester, autoload=True)  # through the pytest11 entry point
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*no recording for test_flow.py::test_agent: agentreplay/test_agent.jsonl does not "
        "exist*",
        "*pytest test_flow.py::test_agent --agentreplay-mode=once",
    ])
    assert not (pytester.path / "values.jsonl").exists()  # the test never ran live
    assert not recording(pytester).exists()


def test_once_records_then_replay_serves_the_same_values(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1, 2]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    recorded = recording(pytester).read_bytes()
    run(pytester).assert_outcomes(passed=1)  # none, the default: replay only
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)  # exists: replays
    live, replayed, again = values(pytester)
    assert len(live) == 2 and live[0] != live[1]
    assert replayed == live and again == live
    assert recording(pytester).read_bytes() == recorded


def test_recording_is_one_json_object_per_line(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([7]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    lines = recording(pytester).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["t"] for r in records] == ["run", "step", "finish"]
    step = records[1]
    assert (step["kind"], step["name"], step["input"]) == ("tool", "rand", {"i": 7})
    assert step["output"] == values(pytester)[0][0]
    assert records[2]["status"] == "complete"
    with open_store(f"file:{recording(pytester)}") as store:  # and it verifies
        run_id = store.list_runs()[0].run_id
        assert store.verify(run_id).ok


def test_replay_refuses_network_access(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1], tail="""    if agentreplay.mode.value == "replay":
        import socket
        from agentreplay_core import NetworkAccessDuringReplay
        with pytest.raises(NetworkAccessDuringReplay):
            socket.create_connection(("203.0.113.1", 80), timeout=5)
        keep(["refused"])
"""))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)
    assert values(pytester)[-1] == ["refused"]


def test_divergence_fails_the_test_with_step_and_diff(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1, 2]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    write(pytester, agent_test([1, 3]))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E *ReplayDivergence: replay diverged (tool_args_changed) in run *, step 2: tool 'rand'",
        "E * ~ i: 2 -> 3",
        "test_flow.py:*: ReplayDivergence",
        "*pytest test_flow.py::test_agent --agentreplay-mode=all",
    ])
    # shown at the test's line, not deep inside agentreplay
    assert "_player.py" not in result.stdout.str()


def test_unused_recorded_steps_fail_the_test_with_a_hint(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1, 2]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    write(pytester, agent_test([1]))
    result = run(pytester)
    result.assert_outcomes(failed=1)  # the test fails, not its teardown
    result.stdout.fnmatch_lines([
        "*replay diverged (missing_call)*",
        "*1 recorded step was never replayed: 2 (tool 'rand')*",
        "*@pytest.mark.agentreplay(allow_unused=True)*",
    ])
    write(pytester, agent_test([1], marker="@pytest.mark.agentreplay(allow_unused=True)"))
    run(pytester).assert_outcomes(passed=1)


def test_new_episodes_records_new_calls_and_the_file_then_replays(
        pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1, 2]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    write(pytester, agent_test([1, 2, 3]))
    run(pytester).assert_outcomes(failed=1)  # none: the new call is a divergence
    result = run(pytester, "--agentreplay-mode=new_episodes")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*rewrote agentreplay/test_agent.jsonl with new calls*"])
    run(pytester).assert_outcomes(passed=1)  # the rewritten file replays in none mode
    first, extended, replayed = values(pytester)
    assert extended[:2] == first  # recorded calls were served, not made again
    assert replayed == extended
    steps = [json.loads(line) for line in recording(pytester).read_text().splitlines()
             if json.loads(line)["t"] == "step"]
    assert [s["input"]["i"] for s in steps] == [1, 2, 3]


def test_new_episodes_without_new_calls_leaves_the_file(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    before = recording(pytester).read_bytes()
    run(pytester, "--agentreplay-mode=new_episodes").assert_outcomes(passed=1)
    assert recording(pytester).read_bytes() == before


def test_all_records_again(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    before = recording(pytester).read_bytes()
    run(pytester, "--agentreplay-mode=all").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)
    first, second, replayed = values(pytester)
    assert second != first  # called live again
    assert replayed == second
    assert recording(pytester).read_bytes() != before


def test_a_failing_test_writes_no_recording(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1], tail="    assert False, 'the agent got it wrong'\n"))
    result = run(pytester, "--agentreplay-mode=once")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not saved (the test did not pass): "
                                 "agentreplay/test_agent.jsonl; the partial recording is in *"])
    assert not recording(pytester).exists()
    kept = result.stdout.str().split("the partial recording is in ")[1].split()[0]
    lines = (Path(kept) / "recording.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["status"] == "failed"  # kept for a look, sealed failed
    # with a recording from a passing run, re-recording a failing test keeps the old one
    write(pytester, agent_test([1]))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=1)
    good = recording(pytester).read_bytes()
    write(pytester, agent_test([1], tail="    assert False\n"))
    run(pytester, "--agentreplay-mode=all").assert_outcomes(failed=1)
    assert recording(pytester).read_bytes() == good


def test_recording_file_names(pytester: pytest.Pytester) -> None:
    write(pytester, f"""
@pytest.mark.agentreplay
@pytest.mark.parametrize("model", ["gpt/4 mini", "plain"])
def test_param(agentreplay, model):
    agentreplay.call("tool", "rand", {{"model": model}}, random.random)


class TestAgent:
    def test_method(self, agentreplay):
        agentreplay.call("tool", "rand", {{}}, random.random)

{agent_test([1], marker='@pytest.mark.agentreplay("flows/checkout")', name="test_named")}
""")
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=4)
    files = sorted(str(p.relative_to(pytester.path / "agentreplay"))
                   for p in (pytester.path / "agentreplay").rglob("*.jsonl"))
    hashed = [f for f in files if re.fullmatch(r"test_param\[gpt_4_mini\]-[0-9a-f]{8}\.jsonl",
                                                f)]
    assert len(hashed) == 1  # "/" and " " replaced, so a hash keeps the name unique
    assert sorted(set(files) - set(hashed)) == [
        "TestAgent.test_method.jsonl", "flows/checkout.jsonl", "test_param[plain].jsonl"]
    run(pytester).assert_outcomes(passed=4)


def test_marked_test_gets_the_session_without_asking(pytester: pytest.Pytester) -> None:
    write(pytester, """
@pytest.mark.agentreplay
def test_marked():
    keep([active_session().call("tool", "rand", {}, random.random)])


def test_unmarked():
    assert active_session() is None
""")
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=2)
    run(pytester).assert_outcomes(passed=2)
    live, replayed = values(pytester)
    assert replayed == live
    assert [p.name for p in (pytester.path / "agentreplay").iterdir()] == ["test_marked.jsonl"]


def test_marker_options_reach_record_and_replay(pytester: pytest.Pytester) -> None:
    write(pytester, """
@pytest.mark.agentreplay(entropy=True)
def test_clock():
    import time, uuid
    keep([time.time(), str(uuid.uuid4()), random.random()])
""", agent_test([1, 2], name="test_order"))
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=2)
    run(pytester, "-k", "test_clock").assert_outcomes(passed=1)
    live, _, replayed = values(pytester)
    assert replayed == live  # the clock, the id and the seed came from the recording
    write(pytester, agent_test([2, 1], marker="@pytest.mark.agentreplay('test_order')",
                               name="test_keyed"),
          agent_test([2, 1], marker="@pytest.mark.agentreplay('test_order', match='sequential')",
                     name="test_sequential"))
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_flow.py::test_sequential - *"])


LOGIN = """
@pytest.mark.agentreplay{options}
def test_login{suffix}(agentreplay):
    import os
    keep([agentreplay.call("tool", "login", {{"password": os.environ["DB_PASSWORD"]}},
                           random.random)])
"""


def test_check_secrets_false_replays_a_recording_made_under_another_key(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # a developer records with their own key and password; CI has neither
    write(pytester, LOGIN.format(options="", suffix="_checked"),
          LOGIN.format(options="(check_secrets=False)", suffix="_unchecked"))
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "a developer's key")
    monkeypatch.setenv("DB_PASSWORD", "developer-pass-1")
    run(pytester, "--agentreplay-mode=once").assert_outcomes(passed=2)
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "the CI's key")
    monkeypatch.setenv("DB_PASSWORD", "ci-dummy-pass-2")
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_flow.py::test_login_checked - *"])
    assert "but for its secrets" in result.stdout.str()
    assert "check_secrets=False" in result.stdout.str()
    live_checked, live_unchecked, replayed = values(pytester)
    assert replayed == live_unchecked != live_checked


def test_bad_mode_and_marker_options_are_explained(pytester: pytest.Pytester) -> None:
    write(pytester, agent_test([1], marker="@pytest.mark.agentreplay(entropi=True)"))
    result = run(pytester, "--agentreplay-mode=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid choice: 'sometimes' (choose from *none*once*"
                                 "new_episodes*all*"])
    pytester.makeini("[pytest]\nagentreplay_mode = always\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown agentreplay record mode 'always'; valid modes: "
                                 "none, once, new_episodes, all*"])
    pytester.makeini("[pytest]\nagentreplay_mode = once\n")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown option entropi; accepted: name, entropy*"])


def test_record_mode_table() -> None:
    expected = {
        (RecordMode.NONE, True): Plan.REPLAY, (RecordMode.NONE, False): Plan.MISSING,
        (RecordMode.ONCE, True): Plan.REPLAY, (RecordMode.ONCE, False): Plan.RECORD,
        (RecordMode.NEW_EPISODES, True): Plan.EXTEND,
        (RecordMode.NEW_EPISODES, False): Plan.RECORD,
        (RecordMode.ALL, True): Plan.RECORD, (RecordMode.ALL, False): Plan.RECORD,
    }
    assert {key: plan(*key) for key in expected} == expected
    with pytest.raises(ValueError, match="valid modes: none, once, new_episodes, all"):
        RecordMode.parse("sometimes")


def test_names_are_safe_distinct_and_stable() -> None:
    ids = ["t.py::test_x[a/b]", "t.py::test_x[a:b]", "t.py::test_x[a b]", "t.py::test_x[ab]",
           "t.py::test_x[" + "long" * 60 + "]"]
    names = [cassette_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert names == [cassette_name(i) for i in ids]
    assert all(re.fullmatch(r"[A-Za-z0-9_.,=+\-\[\]]{1,129}", n) for n in names)
    assert names[3] == "test_x[ab]"
    with pytest.raises(ValueError, match="relative path"):
        cassette_path(Path("/p/t.py"), "t.py::x", "../elsewhere")
    with pytest.raises(ValueError, match="at most one positional"):
        marker_options(("a", "b"), {})
