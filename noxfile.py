"""Test sessions. The version matrix is data at the top; `nox` runs the default sessions."""

from __future__ import annotations

import os
import shutil
import subprocess

import nox

# -- the matrix (data) ------------------------------------------------------------------------
#: Pythons the core is tested on, with the embedded PostgreSQL 16 + pgvector (pgserver)
CORE_PYTHONS = ["3.10", "3.11", "3.12"]
#: the second run of the store tests: Debian's PostgreSQL 15 binaries, no pgvector
PG15_BIN = "/usr/lib/postgresql/15/bin"
PG15_PYTHON = "3.11"
LINT_PYTHON = "3.11"
#: the newest releases of every framework line run in `tests`; the older lines the adapters
#: support run here, each on one Python (issue 6 widens this to the full matrix)
LANGCHAIN_LINES = {
    "0.3": ["langchain-core>=0.3,<0.4", "langgraph>=0.6,<1", "langchain-tests>=0.3.20,<0.4"],
}
LLAMAINDEX_LINES = {
    "0.12": ["llama-index-core>=0.12,<0.13"],
    "0.13": ["llama-index-core>=0.13,<0.14"],
}
FRAMEWORK_PYTHON = "3.11"
#: what the `tests` session adds to the newest langchain-core: create_agent lives in langchain
LANGCHAIN_LATEST = ["langchain>=1"]

nox.options.sessions = ["tests", "tests_pg15", "tests_langchain", "tests_llamaindex", "lint",
                        "typecheck"]
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
nox.options.reuse_existing_virtualenvs = True

# uv must use the interpreters on this machine, never download one.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


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
    wanted = {*CORE_PYTHONS, PG15_PYTHON, LINT_PYTHON, FRAMEWORK_PYTHON}
    extra = [v for v in versions
             if v not in current and any(v.startswith(w + ".") for w in wanted)]
    if extra:
        os.environ["PYENV_VERSION"] = ":".join(current + extra)


_expose_pyenv_pythons()


def _install(session: nox.Session, extras: str = "all", *more: str) -> None:
    session.install("-e", f".[{extras}]", "--group", "test", *more)


def _print_versions(session: nox.Session, *packages: str) -> None:
    session.run("python", "-c", "import importlib.metadata as m, sys; "
                "print(*(f'{p} {m.version(p)}' for p in sys.argv[1:]))", *packages,
                silent=False)


@nox.session(python=CORE_PYTHONS)
def tests(session: nox.Session) -> None:
    """The whole suite against a PostgreSQL 16 + pgvector that the tests start themselves,
    with the newest release of every framework."""
    _install(session, "all", "--group", "langchain-test", *LANGCHAIN_LATEST)
    _print_versions(session, "langchain-core", "langgraph", "langchain", "llama-index-core")
    session.run("pytest", *session.posargs)


@nox.session(python=FRAMEWORK_PYTHON)
@nox.parametrize("line", list(LANGCHAIN_LINES))
def tests_langchain(session: nox.Session, line: str) -> None:
    """The LangChain adapter's tests on an older langchain-core line."""
    _install(session, "embedded,langchain", "--group", "langchain-test", *LANGCHAIN_LINES[line])
    _print_versions(session, "langchain-core", "langgraph", "langchain-tests")
    session.run("pytest", "tests/langchain", *session.posargs)


@nox.session(python=FRAMEWORK_PYTHON)
@nox.parametrize("line", list(LLAMAINDEX_LINES))
def tests_llamaindex(session: nox.Session, line: str) -> None:
    """The LlamaIndex adapter's tests on an older llama-index-core line."""
    _install(session, "embedded,llamaindex", *LLAMAINDEX_LINES[line])
    _print_versions(session, "llama-index-core")
    session.run("pytest", "tests/llamaindex", *session.posargs)


@nox.session(python=PG15_PYTHON)
def tests_pg15(session: nox.Session) -> None:
    """The core suite again on Debian's PostgreSQL 15, which has no pgvector."""
    if not os.path.exists(os.path.join(PG15_BIN, "initdb")):
        session.error(f"PostgreSQL 15 binaries not found in {PG15_BIN} "
                      "(apt-get install postgresql-15)")
    _install(session, "embedded")
    session.run("pytest", "tests/core", *session.posargs,
                env={"AGENTREPLAY_TEST_PGBIN": PG15_BIN})


@nox.session(python=LINT_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session(python=LINT_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the packages and the tests."""
    session.install("-e", ".[all]", "--group", "lint", "--group", "langchain-test",
                    *LANGCHAIN_LATEST)
    session.run("mypy")


@nox.session(python=LINT_PYTHON)
def bench(session: nox.Session) -> None:
    """Recording cost against the seed recorder, printed as ratios (not part of the tests)."""
    _install(session, "embedded")
    session.run("python", "-m", "benchmarks.bench_record", *session.posargs)


@nox.session(python=LINT_PYTHON)
def demo(session: nox.Session) -> None:
    """The README's demo, on a throwaway embedded PostgreSQL."""
    _install(session, "embedded")
    session.run("agentreplay", "demo",
                env={"AGENTREPLAY_EMBEDDED_DIR": session.create_tmp() + "/pgdata"})
