"""What we claim to support is written once: pyproject's extras. The adapters' version
constants, the nox matrix and the README's table must agree with them.

This imports noxfile.py, so it runs where nox is installed (the `typecheck` session, a dev
environment); it needs both frameworks installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import nox
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import agentreplay_langchain
import agentreplay_llamaindex
import noxfile
from agentreplay_llamaindex._compat import is_supported

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
FRAMEWORKS = {f.package: f for f in noxfile.FRAMEWORKS}


def extra(name: str, package: str) -> SpecifierSet:
    """`package`'s range in pyproject's extra `name`, read here without the noxfile's help."""
    found = [Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"][name]
             if Requirement(text).name == package]
    assert len(found) == 1, f"the {name!r} extra should name {package} once"
    return found[0].specifier


@pytest.mark.parametrize(
    ("extra_name", "package", "constant"),
    [
        ("langchain", "langchain-core", agentreplay_langchain.SUPPORTED_LANGCHAIN_CORE),
        ("llamaindex", "llama-index-core", agentreplay_llamaindex.SUPPORTED_VERSIONS),
    ],
)
def test_each_adapter_constant_equals_its_extra(extra_name: str, package: str,
                                                constant: str) -> None:
    assert SpecifierSet(constant) == extra(extra_name, package), (
        f"the adapter's supported range {constant!r} and pyproject's {extra_name!r} extra "
        "differ: change both together")


@pytest.mark.parametrize("version", ["0.11.9", "0.12.0", "0.12.52", "0.13.7", "0.14.25",
                                     "0.15.0", "1.0.0"])
def test_llamaindex_runtime_check_agrees_with_the_extra(version: str) -> None:
    assert is_supported(version) == (Version(version) in extra("llamaindex", "llama-index-core"))


@pytest.mark.parametrize("package", sorted(FRAMEWORKS))
def test_the_rows_span_the_extra_from_its_floor_line_to_its_ceiling(package: str) -> None:
    framework = FRAMEWORKS[package]
    spec = extra(framework.extra, package)
    floors = [Version(c.version) for c in spec if c.operator == ">="]
    ceilings = [Version(c.version) for c in spec if c.operator == "<"]
    assert len(floors) == 1 and len(ceilings) == 1, f"{package}: {spec} needs one >= and one <"
    lines = sorted({tuple(int(p) for p in row.line.split(".")) for row in framework.rows})
    oldest, newest = lines[0], lines[-1]
    assert floors[0].release[:len(oldest)] == oldest, (
        f"{package}: the extra starts at {floors[0]} but the oldest row tests {oldest}")
    after_newest = Version(".".join(str(p) for p in (*newest[:-1], newest[-1] + 1)))
    assert ceilings[0] == after_newest, (
        f"{package}: the extra admits up to {ceilings[0]} but the newest row tests {newest}.x: "
        "add a row for each line the extra admits")


@pytest.mark.parametrize("package", sorted(FRAMEWORKS))
def test_every_row_installs_releases_the_extra_admits(package: str) -> None:
    framework = FRAMEWORKS[package]
    spec = extra(framework.extra, package)
    for row in framework.rows:
        requirement = Requirement(noxfile.row_requirement(framework, row))
        assert requirement.name == package
        if row.release == "floor":
            (pin,) = requirement.specifier
            assert pin.operator == "==" and Version(pin.version) in spec


@pytest.mark.parametrize(
    ("spec", "line", "lowest"),
    [
        (">=0.3.0,<2", "1", "1.0.0"),
        (">=0.3.0,<2", "0.3", "0.3.0"),
        (">0.3.0,<2", "0.3", "0.3.1"),
        (">=0.3,!=1.0.*,!=1.1.*,<2", "1", "1.2.0"),
        (">=0.3.81,!=1.0.*,!=1.1.*,!=1.2.0,!=1.2.1,!=1.2.2,!=1.2.3,!=1.2.4,<2", "1", "1.2.5"),
        (">=0.3.81,!=1.0.*,<2", "0.3", "0.3.81"),
        (">=1.0.3,<2", "1", "1.0.3"),
        ("~=1.2", "1", "1.2.0"),
        (">=0.12.0,<0.15", "0.14", "0.14.0"),
    ],
)
def test_lowest_release_of_a_line(spec: str, line: str, lowest: str) -> None:
    assert noxfile.lowest_release(SpecifierSet(spec), line) == Version(lowest)


def test_lowest_release_of_a_line_the_range_excludes_says_so() -> None:
    with pytest.raises(ValueError, match=r"admits no 0\.2\.x release"):
        noxfile.lowest_release(SpecifierSet(">=0.3.0,<2"), "0.2")


def test_pythons_match_requires_python() -> None:
    requires = SpecifierSet(PYPROJECT["project"]["requires-python"])
    oldest = Version(noxfile.PYTHONS[0])
    assert oldest in requires
    assert Version(f"{oldest.major}.{oldest.minor - 1}") not in requires
    row_pythons = {p for f in noxfile.FRAMEWORKS for row in f.rows for p in row.pythons}
    assert row_pythons <= set(noxfile.PYTHONS)
    assert set(noxfile.PGSERVER_PYTHONS) < set(noxfile.PYTHONS)


def test_readme_table_is_the_one_the_matrix_makes() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(re.escape(noxfile.README_START) + r"\n(.*?)\n"
                      + re.escape(noxfile.README_END), readme, flags=re.S)
    assert found is not None, "README.md lacks the supported-versions markers"
    assert found.group(1) == noxfile.supported_versions_table(), (
        "README.md's Supported versions table is out of date: run `nox -s readme`")


def test_readme_table_names_every_row() -> None:
    table = noxfile.supported_versions_table()
    for framework in noxfile.FRAMEWORKS:
        assert framework.package in table
        for row in framework.rows:
            cells = f"| {framework.package} {row.line}.x |"
            assert cells in table and ", ".join(row.pythons) in table


def test_replacing_the_readme_section_keeps_the_rest() -> None:
    text = f"# x\n\n{noxfile.README_START}\nold\n{noxfile.README_END}\n\n## after\n"
    assert noxfile.replace_between_markers(text, "new") == (
        f"# x\n\n{noxfile.README_START}\nnew\n{noxfile.README_END}\n\n## after\n")
    with pytest.raises(ValueError, match="supported-versions"):
        noxfile.replace_between_markers("# no markers\n", "new")
