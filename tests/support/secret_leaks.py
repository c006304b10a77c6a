"""Fake secrets of every kind redaction knows, and every byte a store keeps, to grep for them.

The secrets are made up here, randomly, in the shapes real ones have (never real keys). Each
carries the text an agent would hold it in (`in_text`: a prompt line, a header, a config line)
and `marker`, its random core: a run leaks the secret if the marker occurs in any stored byte,
whatever encoding the byte went through (JSON escapes, base64 in the spool or in bytes values).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from agentreplay_core import Store
    from tests.support.pgcluster import PgCluster

_ALNUM = string.ascii_letters + string.digits
_UPPER = string.ascii_uppercase + string.digits


def _random(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class FakeSecret:
    kind: str
    value: str
    #: how the agent holds it in text
    in_text: str
    #: a random part of the secret that nothing but a leak can contain
    marker: str


def fake_secrets() -> list[FakeSecret]:
    """One fresh fake secret of each kind, each in the text it typically travels in."""
    out = []

    def add(kind: str, value: str, template: str = "{}", marker: str | None = None) -> None:
        out.append(FakeSecret(kind, value, template.format(value), marker or value))

    core = _random(40)
    add("openai", f"sk-proj-{core}", "use the key {} for this call", core)
    core = _random(80, _ALNUM + "_-")
    add("anthropic", f"sk-ant-api03-{core}AA", "ANTHROPIC_API_KEY={}", core)
    core = _random(16, _UPPER)
    add("aws_access_key", f"AKIA{core}", "aws_access_key_id = {}", core)
    core = _random(35, _ALNUM + "_-")
    add("google", f"AIza{core}", "https://maps.example/api?key={}", core)
    core = _random(36)
    add("github", f"ghp_{core}", "git clone https://x:{}@github.example/o/r", core)
    core = _random(36)
    add("github_oauth", f"gho_{core}", "oauth token is {} now", core)
    core = _random(59)
    add("github_pat", f"github_pat_{_random(22)}_{core}", "push with {} please", core)
    core = _random(24)
    add("stripe", f"sk_live_{core}", "charge it with {} today", core)
    core = _random(34)
    add("huggingface", f"hf_{core}", "hub login {} done", core)
    core = _random(30, _ALNUM + "_-")
    add("jwt", f"eyJ{_random(20)}.eyJ{_random(30)}.{core}", "session {} expired", core)
    core = _random(24)
    add("slack", f"xoxb-{_random(11, string.digits)}-{_random(12, string.digits)}-{core}",
        "slack token {}", core)
    core = _random(40)
    add("bearer", f"tok{_random(4, string.digits)}{core}",
        "curl -H 'Authorization: Bearer {}' https://api.example", core)
    body = "\n".join(_random(64, _ALNUM + "+/") for _ in range(6))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    out.append(FakeSecret("pem", pem, f"here is the deploy key:\n{pem}\n", body.split("\n")[2]))
    core = _random(18)
    add("password", f"pw-{core}", "db password: {}", core)
    core = _random(20)
    add("url_password", core, "postgresql://agent:{}@db.example:5432/prod")
    core = _random(24)
    # a tool's JSON result: the field's name in text, the value quoted whole
    add("cookie", f"sessionid={core}; Path=/", '{{"headers": {{"Cookie": "{}"}}}}', core)
    core = _random(16)
    # ... and an object under a secret field's name: its strings, whatever they are named
    add("credentials", f"pw.{core}",
        '{{"db": {{"credentials": {{"pass": "{}"}}, "port": 5432}}}}', core)
    core = _random(20)
    # ... a long quoted value of short words: the secret comes past the first 256 characters
    cookies = "; ".join(f"c{i}=v{i}" for i in range(60))
    add("long_cookie", f"{cookies}; sid=<{core}>", '{{"headers": {{"cookie": "{}"}}}}', core)
    return out


# -- reading everything a store keeps -------------------------------------------------------

_B64_FIELD = re.compile(rb'"(?:v|input|output|f64le|b64)":"([A-Za-z0-9+/=]{8,})"')


def _with_decoded_base64(blob: bytes) -> bytes:
    """`blob` plus the decoded form of every base64 field in it (bytes values in the codec,
    step payloads in spool files), recursively: a secret must not hide in an encoding."""
    parts = [blob]
    for m in _B64_FIELD.finditer(blob):
        try:
            decoded = base64.b64decode(m.group(1), validate=True)
        except ValueError:
            continue
        parts.append(_with_decoded_base64(decoded))
    return b"\n".join(parts)


def files_bytes(*roots: Path) -> bytes:
    """Every byte of every file under `roots` (spool files, JSONL stores, exports), with the
    base64 inside them decoded too, and JSON string escapes undone."""
    parts = []
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            parts.append(_with_decoded_base64(path.read_bytes()))
    blob = b"\n".join(parts)
    return blob + b"\n" + _unescaped(blob)


def _unescaped(blob: bytes) -> bytes:
    """JSON string escapes undone, so text with newlines is found as it was written."""
    return blob.replace(b"\\n", b"\n").replace(b'\\"', b'"').replace(b"\\\\", b"\\")


def schema_bytes(dsn: str, schema: str) -> bytes:
    """Every row of every table of `schema`, as PostgreSQL prints it (a pg_dump of the data)."""
    import psycopg
    from psycopg import sql

    parts: list[bytes] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,))]
        assert tables, f"schema {schema} has no tables"
        for table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table))
            parts.extend(row[0].encode() for row in conn.execute(query))
    blob = b"\n".join(parts)
    return _with_decoded_base64(blob) + b"\n" + _unescaped(blob)


def leaks(blob: bytes, fakes: list[FakeSecret]) -> list[str]:
    """The kinds of secret whose marker (or whole value) occurs in `blob`."""
    found = []
    for fake in fakes:
        needles = {fake.marker, fake.value, json.dumps(fake.value)[1:-1]}
        if any(n.encode() in blob for n in needles):
            found.append(fake.kind)
    return found


def partial_leaks(blob: bytes, fakes: list[FakeSecret], run: int = 6) -> list[str]:
    """The kinds of secret of which `run` characters in a row of the random core occur in
    `blob`: a stream whose chunks each hold the start of a secret, too short for a rule to
    recognise, leaks most of it though no chunk holds it whole."""
    return [fake.kind for fake in fakes
            if any(fake.marker[i:i + run].encode() in blob
                   for i in range(len(fake.marker) - run + 1))]


def every_place_stored(record: Callable[[Store], UUID], store: Store, dsn: str, schema: str,
                       down_cluster: PgCluster, tmp_path: Path) -> tuple[bytes, bytes]:
    """Record with `record(store)` (it returns the run id) everywhere a run's bytes are kept:
    `store`'s schema, an export of that run, a file store, and the spool of a store whose
    database (`down_cluster`, stopped here) went away. Returns (those bytes, the bytes of a
    file store recorded without redaction: where every secret must be found)."""
    from agentreplay_core import open_store
    from agentreplay_core._transfer import export_run

    export_run(store, record(store), tmp_path / "export.jsonl")
    with open_store(f"file:{tmp_path / 'files'}", spool_dir=tmp_path / "unused") as files:
        record(files)
    down = open_store(down_cluster.dsn, schema="spooled", spool_dir=tmp_path / "spool")
    down._sink.retry_seconds = 0.3
    down_cluster.stop()
    spooled = record(down)
    down.close()
    assert (tmp_path / "spool" / f"{spooled}.jsonl").exists()
    with open_store(f"file:{tmp_path / 'plain'}", redaction=None) as plain:
        record(plain)
    stored = schema_bytes(dsn, schema) + files_bytes(
        tmp_path / "export.jsonl", tmp_path / "files", tmp_path / "spool")
    return stored, files_bytes(tmp_path / "plain")
