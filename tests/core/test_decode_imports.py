"""A run log never makes decoding, or a replay, import a package: importing runs its code."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import Store
from agentreplay_core._codec import decode, encode
from agentreplay_core._errors import SerializationError

_INIT = """\
import pathlib
# the side effect a package's import may have: here, one line per import
with open(pathlib.Path(__file__).with_name("imports.log"), "a") as log:
    log.write("imported\\n")
"""

_MODELS = """\
import dataclasses
import enum

import pydantic


class Grade(enum.Enum):
    PASS = "pass"
    FAIL = "fail"


@dataclasses.dataclass
class Verdict:
    grade: Grade
    reason: str


class Report(pydantic.BaseModel):
    verdict: Verdict
    score: float
"""


class Package:
    def __init__(self, root: Path) -> None:
        self.name = f"agentreplay_probe_{uuid.uuid4().hex[:12]}"
        self.dir = root / self.name
        self.dir.mkdir()
        (self.dir / "__init__.py").write_text(_INIT)
        (self.dir / "models.py").write_text(_MODELS)

    def imports(self) -> int:
        log = self.dir / "imports.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def forget(self) -> None:
        """As in a fresh process that has not imported the package."""
        for name in [self.name, f"{self.name}.models"]:
            sys.modules.pop(name, None)

    def report(self) -> Any:
        models = importlib.import_module(f"{self.name}.models")
        return models.Report(verdict=models.Verdict(models.Grade.FAIL, "too slow"), score=0.25)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Package]:
    monkeypatch.syspath_prepend(str(tmp_path))
    made = Package(tmp_path)
    yield made
    made.forget()


def test_decode_refuses_a_package_the_program_has_not_imported(package: Package) -> None:
    encoded = encode({"report": package.report()})
    package.forget()
    with pytest.raises(SerializationError) as caught:
        decode(encoded)
    message = str(caught.value)
    assert f"package {package.name!r}, which this program has not imported" in message
    assert f"import {package.name} first" in message
    assert "restore_objects=False" in message
    assert caught.value.path.startswith("$.report")  # the first class decoding meets
    assert package.imports() == 1  # only the recording's own import ran the package's code
    assert decode(encoded, restore_objects=False) == {
        "report": {"verdict": {"grade": "fail", "reason": "too slow"}, "score": 0.25}}
    assert package.imports() == 1


def test_a_submodule_of_an_imported_package_is_imported_as_needed(package: Package) -> None:
    encoded = encode(package.report())
    package.forget()
    importlib.import_module(package.name)  # the program uses the package, not yet its models
    assert f"{package.name}.models" not in sys.modules
    report = decode(encoded)
    models = sys.modules[f"{package.name}.models"]
    assert type(report) is models.Report
    assert type(report.verdict) is models.Verdict
    assert report.verdict.grade is models.Grade.FAIL
    assert package.imports() == 2  # the recording's import and the program's, none by decode


def test_replay_names_the_step_and_imports_nothing(any_store: Store, package: Package) -> None:
    with any_store.record() as rec:
        live = rec.call("tool", "grade", {"run": 7}, package.report)
    package.forget()
    with any_store.replay(rec.run_id) as player, pytest.raises(SerializationError) as caught:
        player.next("tool", "grade", {"run": 7})
    message = str(caught.value)
    assert message.startswith(f"step 1 of run {rec.run_id} (tool 'grade'): ")
    assert f"import {package.name} first" in message
    assert package.imports() == 1
    importlib.import_module(package.name)
    with any_store.replay(rec.run_id) as player:
        replayed = player.next("tool", "grade", {"run": 7})
    # the classes were imported anew, so compare what they hold
    assert replayed.model_dump(mode="json") == live.model_dump(mode="json")
    assert type(replayed).__module__ == f"{package.name}.models"
