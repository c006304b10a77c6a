"""Match keys and paths: how a call is recognised again during replay (DESIGN section 4)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import orjson

from agentreplay_core._codec import canonical_bytes, encode
from agentreplay_core._hashing import feed

_current_path: ContextVar[str] = ContextVar("agentreplay_path", default="")

#: request fields that differ between two runs of the same code (framework run ids, timestamps)
DEFAULT_VOLATILE_KEYS = frozenset({"run_id", "parent_run_id", "trace_id", "span_id"})


def strip_volatile(value: Any, keys: Iterable[str] = DEFAULT_VOLATILE_KEYS) -> Any:
    """A copy of a JSON-like request without the given keys, at any depth."""
    drop = frozenset(keys)
    if isinstance(value, dict):
        return {k: strip_volatile(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [strip_volatile(v, drop) for v in value]
    return value


def match_key_of_canonical(kind: str, name: str, request_json: bytes) -> str:
    """The match key from the request's canonical bytes: SHA-256 of the canonical JSON of
    `[kind, name, request]` (hashed in parts, so the request is neither serialised nor copied
    again), first 32 hex digits."""
    digest = _hashed_prefix(kind, name).copy()
    feed(digest, request_json)
    digest.update(b"]")
    return digest.hexdigest()[:32]


@functools.lru_cache(maxsize=1024)
def _hashed_prefix(kind: str, name: str) -> hashlib._Hash:
    """SHA-256 fed with `[kind,name,`: a call's key starts from a copy (a replayed call keys
    its request on the agent's thread, and most calls share a few kinds and names)."""
    digest = hashlib.sha256()
    digest.update(b"[" + orjson.dumps(kind) + b"," + orjson.dumps(name) + b",")
    return digest


def match_key_of_encoded(kind: str, name: str, encoded_request: Any) -> str:
    """The match key of an already-encoded request."""
    return match_key_of_canonical(kind, name, canonical_bytes(encoded_request))


def match_key(kind: str, name: str, request: Any) -> str:
    """Hash of the canonical request: equal requests give equal keys, whatever the key order."""
    return match_key_of_encoded(kind, name, encode(request, path="request"))


#: what text stored as text (not JSON) cannot hold: NUL (PostgreSQL) and lone surrogates
#: (UTF-8: a name decoded with errors="surrogateescape", such as a file's)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def clean_label(text: str) -> str:
    """A kind/name/path/tag as stored: NUL and lone surrogates, which no store can hold as
    text, become visible escapes (`\\x00`, `\\udcff`).

    Recorder and player both apply it, so such a name still matches on replay.
    """
    if text.isascii():
        return text.replace("\x00", "\\x00") if "\x00" in text else text
    return _UNSTORABLE.sub(_escaped, text)


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_key(match_key: object) -> str:
    """A caller's match key as stored and compared: text (`str()` of anything else), with
    `clean_label`'s escapes. An int key was stored as given and checked as text by `verify`,
    which then failed an untouched run."""
    return clean_label(match_key if type(match_key) is str else str(match_key))


def current_path() -> str:
    """The structural position of the code running now (set with `path_scope`)."""
    return _current_path.get()


def join_path(parent: str, segment: str) -> str:
    segment = segment.replace("/", "%2F")
    return f"{parent}/{segment}" if parent else segment


def is_inside(path: str, parent: str) -> bool:
    """True when `path` lies strictly below `parent` in the run tree."""
    return bool(parent) and path.startswith(parent + "/")


@contextlib.contextmanager
def path_scope(segment: str) -> Iterator[str]:
    """Run the block one level deeper in the run tree; steps recorded inside get this path.

    Calls made inside a step that is later replayed as a whole (the embedding call inside a
    retriever) are recognised by this nesting and are not expected again during replay.
    """
    with at_path(join_path(_current_path.get(), segment)) as path:
        yield path


@contextlib.contextmanager
def at_path(path: str) -> Iterator[str]:
    """Run the block at exactly this position in the run tree."""
    token = _current_path.set(path)
    try:
        yield path
    finally:
        _current_path.reset(token)
