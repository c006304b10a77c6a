"""Test sessions. The version matrix is data at the top; `nox` runs the default sessions.

`nox -l` lists them; `nox -s langchain` runs every LangChain row, `nox -s readme` rewrites the
README's "Supported versions" table from this data (a test checks that it matches).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import nox
from nox.command import CommandFailed
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version


@dataclass(frozen=True)
class Row:
    """One framework line, tested on the oldest and newest Python it supports."""

    line: str  # "0.3" for the 0.3.x releases, "1" for 1.x
    release: Literal["latest", "floor"]  # floor: the lowest release of the line the extra admits
    pythons: tuple[str, ...]
    companions: tuple[str, ...] = ()  # what the adapter's tests drive, bounded to the line
    #: resolve everything else as of this date (uv --exclude-newer): at a floor, the day its
    #: successor came out, so the other packages are those a user of the floor had (change it
    #: with the floor; a floor released after it fails to resolve)
    as_of: str | None = None


@dataclass(frozen=True)
class Framework:
    """An adapter's framework: its extra (also the session's name and tests/<extra>)."""

    package: str
    extra: str
    rows: tuple[Row, ...]
    shows: tuple[str, ...]  # distributions whose versions a session prints before testing
    groups: tuple[str, ...] = ("test",)  # pyproject's dependency groups its tests need


# -- the matrix (data) ------------------------------------------------------------------------
#: every Python we support; the `core` sessions run tests/core on each, with no framework
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: the Pythons pgserver (the `embedded` extra: PostgreSQL 16 + pgvector) has wheels for; on the
#: others the tests run on Debian's PostgreSQL 15, which also proves the no-pgvector path
PGSERVER_PYTHONS = ("3.10", "3.11", "3.12")
PG15_BIN = "/usr/lib/postgresql/15/bin"
#: the one `core` session that also runs the load tests (`-m load`), for the full minute
LOAD_PYTHON = "3.12"
LOAD_SECONDS = "60"
#: lint, typecheck, examples, demo, bench
TOOLS_PYTHON = "3.11"
#: prerelease: the newest Python that still has the embedded PostgreSQL, and what it installs
#: past the extras' upper bounds
PRERELEASE_PYTHON = "3.12"
PRERELEASE_PACKAGES = ("langchain-core", "langchain", "langgraph", "langchain-tests",
                       "llama-index-core")
#: what the examples need besides the `all` extra
EXAMPLES_NEED = ("langchain>=1", "langgraph>=1")

# create_agent lives in `langchain`, which exists for 1.x only. The resolver picks the newest
# releases that these bounds, the row's langchain-core and its date allow. The floor needs the
# date: later langgraph-checkpoint and langgraph-prebuilt releases declare older langchain-core
# and langgraph releases than they work with (at langchain-core 1.0.0 they fail to import).
_LANGCHAIN_0_3 = ("langgraph>=0.6,<1", "langchain-tests>=0.3.20,<0.4")
_LANGCHAIN_1 = ("langchain>=1,<2", "langgraph>=1,<2", "langchain-tests>=1,<2")
FRAMEWORKS = (
    Framework(
        "langchain-core", "langchain",
        rows=(
            Row("0.3", "latest", ("3.10", "3.12"), _LANGCHAIN_0_3),
            Row("1", "floor", ("3.11",), _LANGCHAIN_1, as_of="2026-01-01"),
            Row("1", "latest", ("3.11", "3.13"), _LANGCHAIN_1),
        ),
        shows=("langchain-core", "langchain", "langgraph", "langgraph-checkpoint",
               "langchain-tests"),
        groups=("test", "langchain-test"),
    ),
    Framework(
        "llama-index-core", "llamaindex",
        rows=(
            Row("0.12", "latest", ("3.10", "3.12")),
            Row("0.13", "latest", ("3.11",)),
            Row("0.14", "latest", ("3.11", "3.13")),
        ),
        shows=("llama-index-core", "llama-index-workflows", "llama-index-instrumentation"),
    ),
)
# -----------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent
README_START, README_END = "<!-- supported-versions:start -->", "<!-- supported-versions:end -->"

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"
# No reuse_existing_virtualenvs: a fresh virtualenv each run (uv makes it cheap), since a reused
# one keeps what it has, so a "newest" row would stop following new releases and a dated row
# would not go back in time. Pass -r to reuse them while iterating on tests.

# uv must use the interpreters on this machine, never download one.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


def extra_requirement(framework: Framework) -> str:
    """The framework's requirement in pyproject's extra, as written there (the one place the
    supported range is written)."""
    extras = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    for text in extras[framework.extra]:
        if Requirement(text).name == framework.package:
            return str(text)
    raise ValueError(f"pyproject.toml: the {framework.extra!r} extra does not name "
                     f"{framework.package}; add it there with its supported range")


def extra_spec(framework: Framework) -> SpecifierSet:
    """The versions of the framework that pyproject's extra admits."""
    return Requirement(extra_requirement(framework)).specifier


def lowest_release(spec: SpecifierSet, line: str) -> Version:
    """The lowest release of `line` ("1" for 1.x, "0.3" for 0.3.x) that `spec` admits.

    It is the line's first release or a version a clause names, moved past an exclusion, so
    only those candidates are checked.
    """
    prefix = tuple(int(part) for part in line.split("."))
    candidates = {_padded(prefix)}
    for clause in spec:
        base = tuple(int(part) for part in clause.version.removesuffix(".*").split("."))
        candidates.add(_padded(base))
        if clause.version.endswith(".*"):  # !=1.0.*: the next is 1.1.0
            candidates.add(_padded((*base[:-1], base[-1] + 1)))
        else:  # !=1.0.0, >1.0.0: the next is 1.0.1
            padded = _padded(base).release
            candidates.add(_padded((*padded[:2], padded[2] + 1)))
    admitted = sorted(v for v in candidates if v.release[:len(prefix)] == prefix and v in spec)
    if not admitted:
        raise ValueError(f"the extra's range {spec} admits no {line}.x release; drop that row "
                         "from the matrix or widen the extra")
    return admitted[0]


def _padded(parts: tuple[int, ...]) -> Version:
    return Version(".".join(str(p) for p in (*parts, 0, 0, 0)[:max(3, len(parts))]))


def row_requirement(framework: Framework, row: Row) -> str:
    """What a row installs of the framework itself."""
    if row.release == "floor":
        return f"{framework.package}=={lowest_release(extra_spec(framework), row.line)}"
    return f"{framework.package}=={row.line}.*"


def supported_versions_table() -> str:
    """The README's "Supported versions" section body, made from the matrix above."""
    lines = ["<!-- generated by `nox -s readme` from the matrix in noxfile.py -->", ""]
    lines += [f"- `agentreplay[{f.extra}]` requires `{extra_requirement(f)}`."
              for f in FRAMEWORKS]
    lines += ["", "| extra | line | admitted from | tested with | Python |",
              "| --- | --- | --- | --- | --- |"]
    for framework in FRAMEWORKS:
        for row in framework.rows:
            lowest = lowest_release(extra_spec(framework), row.line)
            tested = "the newest release" if row.release == "latest" else f"{lowest} (the floor)"
            if row.as_of is not None:
                tested += f", the other packages as of {row.as_of}"
            lines.append(f"| `{framework.extra}` | {framework.package} {row.line}.x | {lowest} "
                         f"| {tested} | {', '.join(row.pythons)} |")
    lines += [f"| none | core only, no framework installed | | | {', '.join(PYTHONS)} |", ""]
    others = ", ".join(p for p in PYTHONS if p not in PGSERVER_PYTHONS)
    names = [f"`nox -s {name}`" for name in ("core", *(f.extra for f in FRAMEWORKS))]
    sessions = f"{', '.join(names[:-1])} or {names[-1]}"
    lines.append(textwrap.fill(
        f"Each row runs once per Python, as a session of {sessions}. The tests run on "
        f"PostgreSQL 16 + pgvector (the `embedded` extra) on Python "
        f"{', '.join(PGSERVER_PYTHONS)}, and on Debian's PostgreSQL 15 without pgvector on "
        f"{others}, where pgserver has no wheel: there, install `agentreplay[postgres]` and "
        "use a server of your own.", width=96, break_on_hyphens=False))
    return "\n".join(lines)


def replace_between_markers(text: str, body: str) -> str:
    """`text` with everything between the supported-versions markers replaced by `body`."""
    pattern = re.compile(re.escape(README_START) + r".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"README.md has no {README_START} ... {README_END} section")
    return pattern.sub(lambda _: f"{README_START}\n{body}\n{README_END}", text, count=1)


def _expose_pyenv_pythons() -> None:
    """Make pyenv's python3.X shims resolvable: they need PYENV_VERSION to list them.

    pyenv's own shim sets PYENV_VERSION to the one version running nox, so the versions of the
    matrix are appended to whatever is there (the running one stays first).
    """
    if not shutil.which("pyenv"):
        return
    try:
        versions = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True,
                                  text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return
    current = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    wanted = {*PYTHONS, TOOLS_PYTHON, PRERELEASE_PYTHON,
              *(p for f in FRAMEWORKS for row in f.rows for p in row.pythons)}
    extra = [v for v in versions
             if v not in current and any(v.startswith(w + ".") for w in wanted)]
    if extra:
        os.environ["PYENV_VERSION"] = ":".join(current + extra)


_expose_pyenv_pythons()


# -- session helpers ----------------------------------------------------------------------------
def _python(session: nox.Session) -> str:
    return str(session.python)


def _store_extra(session: nox.Session) -> str:
    """`embedded` where pgserver has a wheel, else `postgres` (the tests use PG15_BIN)."""
    return "embedded" if _python(session) in PGSERVER_PYTHONS else "postgres"


def _pg_env(session: nox.Session) -> dict[str, str]:
    """The tests' PostgreSQL: their own pgserver cluster, else Debian's PostgreSQL 15."""
    if _python(session) in PGSERVER_PYTHONS:
        return {}
    if not Path(PG15_BIN, "initdb").exists():
        session.error(f"Python {_python(session)} has no pgserver wheel, so its tests need "
                      f"PostgreSQL 15 binaries in {PG15_BIN} (apt-get install postgresql-15)")
    return {"AGENTREPLAY_TEST_PGBIN": PG15_BIN}


def _install(session: nox.Session, extras: str, *more: str) -> None:
    session.install("-e", f".[{extras}]", *more)


def _print_versions(session: nox.Session, *packages: str) -> None:
    session.run("python", "-c", "import importlib.metadata as m, sys\n"
                "for p in sys.argv[1:]:\n"
                "    try: print(p, m.version(p))\n"
                "    except m.PackageNotFoundError: print(p, 'not installed')",
                *packages, silent=False)


def _rows(framework: Framework) -> list[Any]:
    return [nox.param(python, row, id=f"{row.line}.x-{row.release}-{python}")
            for row in framework.rows for python in row.pythons]


def _test_framework(session: nox.Session, framework: Framework, row: Row) -> None:
    dated: tuple[str, ...] = ()
    if row.as_of is not None:
        if session.venv_backend != "uv":
            session.error(f"this row resolves as of {row.as_of}, which needs nox's uv backend "
                          "(pip install uv)")
        dated = ("--exclude-newer", row.as_of)
    groups = [arg for group in framework.groups for arg in ("--group", group)]
    _install(session, f"{_store_extra(session)},{framework.extra}", *groups,
             row_requirement(framework, row), *row.companions, *dated)
    _print_versions(session, *framework.shows)
    session.run("pytest", f"tests/{framework.extra}", *session.posargs, env=_pg_env(session))


# -- sessions -----------------------------------------------------------------------------------
@nox.session(python=list(PYTHONS))
def core(session: nox.Session) -> None:
    """tests/core with no framework installed (the adapters' ImportError is real here); on
    LOAD_PYTHON also the load tests, whose figures are printed at the end."""
    _install(session, _store_extra(session), "--group", "test")
    _print_versions(session, "psycopg", "pgserver", *(f.package for f in FRAMEWORKS))
    env = {**_pg_env(session), "AGENTREPLAY_TEST_WITHOUT_FRAMEWORKS": "1"}
    if _python(session) != LOAD_PYTHON:
        session.run("pytest", "tests/core", "-m", "not load", *session.posargs, env=env)
        return
    # not session.create_tmp(): that points TMPDIR into the checkout, where the plugin tests'
    # pytester runs would pick up this project's pytest configuration
    report = Path(tempfile.gettempdir()) / f"agentreplay-load-{os.getpid()}.md"
    report.unlink(missing_ok=True)
    env.update(AGENTREPLAY_LOAD_SECONDS=LOAD_SECONDS, AGENTREPLAY_LOAD_REPORT=str(report))
    try:
        session.run("pytest", "tests/core", *session.posargs, env=env)
    finally:
        if report.exists():
            session.log(f"load figures:\n{report.read_text()}")
            report.unlink()


@nox.session
@nox.parametrize(("python", "row"), _rows(FRAMEWORKS[0]))
def langchain(session: nox.Session, row: Row) -> None:
    """tests/langchain on one langchain-core line (with its langgraph and langchain-tests)."""
    _test_framework(session, FRAMEWORKS[0], row)


@nox.session
@nox.parametrize(("python", "row"), _rows(FRAMEWORKS[1]))
def llamaindex(session: nox.Session, row: Row) -> None:
    """tests/llamaindex on one llama-index-core line."""
    _test_framework(session, FRAMEWORKS[1], row)


@nox.session(python=TOOLS_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session(python=TOOLS_PYTHON)
def typecheck(session: nox.Session) -> None:
    """tests/test_supported_versions.py, then mypy --strict (packages, tests, this file).

    That test checks that pyproject's extras, the adapters' version constants, this matrix and
    the README's table agree; it imports this file, so it runs here, where nox is installed.
    """
    _install(session, "all", "--group", "lint", "--group", "test", *_LANGCHAIN_1,
             "nox>=2024.10.9")
    session.run("pytest", "tests/test_supported_versions.py", *session.posargs)
    session.run("mypy")


@nox.session(python=TOOLS_PYTHON)
def examples(session: nox.Session) -> None:
    """Every examples/*.py (record, then replay).

    They share an embedded PostgreSQL in the session's temporary directory.
    """
    scripts = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
    if not scripts:
        session.error("examples/ holds no example scripts (examples/*.py, not starting with _)")
    _install(session, "all", *EXAMPLES_NEED)
    _print_versions(session, *(p for f in FRAMEWORKS for p in f.shows[:3]))
    env = {"AGENTREPLAY_EMBEDDED_DIR": session.create_tmp() + "/pgdata"}
    failed = []
    for script in scripts:
        session.log(f"example {script.name}")
        try:
            session.run("python", str(script.relative_to(ROOT)), env=env)
        except CommandFailed:
            failed.append(script.name)
    if failed:
        session.error(f"these examples failed: {', '.join(failed)}")


@nox.session(python=PRERELEASE_PYTHON, default=False)
def prerelease(session: nox.Session) -> None:
    """Opt-in: the whole suite on the newest prereleases of the frameworks.

    They are installed past the extras' upper bounds: this shows what the next releases break.
    """
    _install(session, "embedded", "--group", "test", "--group", "langchain-test")
    pre = "--prerelease=allow" if session.venv_backend == "uv" else "--pre"
    session.install(pre, *PRERELEASE_PACKAGES)
    _print_versions(session, *(p for f in FRAMEWORKS for p in f.shows))
    suites = ["tests/core", *(f"tests/{f.extra}" for f in FRAMEWORKS)]
    session.run("pytest", *(session.posargs or suites))


#: what the benchmarks need: the embedded PostgreSQL and both frameworks
_BENCH_EXTRAS = "embedded,langchain,llamaindex"


@nox.session(python=TOOLS_PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """agentreplay against its baselines in the same process, printed as ratios with a
    PASS/MISS line per performance target (not part of the tests). `nox -s bench -- --quick`
    takes under a minute; `-- --only throughput` runs one group."""
    _install(session, _BENCH_EXTRAS, "--group", "test")
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(python=TOOLS_PYTHON)
def bench_harness(session: nox.Session) -> None:
    """The benchmark harness's own tests: its baselines, its verdicts and a `--quick` run of
    every group. They check no number; `bench` measures."""
    _install(session, _BENCH_EXTRAS, "--group", "test")
    session.run("pytest", "tests/benchmarks", *session.posargs)


@nox.session(python=TOOLS_PYTHON)
def demo(session: nox.Session) -> None:
    """The README's demo command as written there (its extras, nothing else), on a throwaway
    embedded PostgreSQL: the quick start cannot rot."""
    command = readme_command("demo-command")
    found = re.fullmatch(r'python3 -m pip install -q -e "\.\[([\w,]+)\]" && '
                         r"python3 -m agentreplay_core demo", command)
    if found is None:
        session.error(f"README's demo command changed shape; update this session: {command}")
    _install(session, found.group(1))
    session.run("python", "-m", "agentreplay_core", "demo",
                env={"AGENTREPLAY_EMBEDDED_DIR": session.create_tmp() + "/pgdata"})


def readme_command(marker: str) -> str:
    """The one-line command in the fenced block after `<!-- marker -->` in README.md."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- {marker} -->\n```bash\n(.*?)\n```", text)
    if found is None:
        raise ValueError(f"README.md has no command block after <!-- {marker} -->")
    return found.group(1).strip()


@nox.session(python=False, default=False)
def readme(session: nox.Session) -> None:
    """Rewrite README.md's "Supported versions" table from the matrix above."""
    path = ROOT / "README.md"
    path.write_text(replace_between_markers(path.read_text(), supported_versions_table()))
    session.log("README.md: Supported versions rewritten")
