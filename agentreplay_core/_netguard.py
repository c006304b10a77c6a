"""Refuse network access during replay (DESIGN section 5).

`network_guard()` patches the `socket` module process-wide while at least one guard is active
(guards are reference-counted, so nested and concurrent guards are fine): outbound
connections, UDP sends and name lookups raise `NetworkAccessDuringReplay` unless they go to a
Unix socket or to an address the guards allow (the run store's own). asyncio, urllib3, httpx
and the standard library all connect through these functions, so an unrecorded call cannot
leak out. Code that opens connections in C (libpq, uvloop, grpc) is not seen.

Example:
    >>> import socket
    >>> with network_guard(run_id="demo"):
    ...     try:
    ...         socket.create_connection(("203.0.113.1", 443))
    ...     except NetworkAccessDuringReplay as exc:
    ...         print(type(exc).__name__)
    NetworkAccessDuringReplay
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agentreplay_core._errors import NetworkAccessDuringReplay

__all__ = ["network_guard"]

Host = ipaddress.IPv4Address | ipaddress.IPv6Address | str  # str: a lower-case name
_LOCALHOST = "localhost"
_LOOPBACK_ALIASES: tuple[Host, ...] = (
    _LOCALHOST, ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
_AF_UNIX = getattr(socket, "AF_UNIX", None)
_INET = (socket.AF_INET, socket.AF_INET6)


@dataclass(frozen=True)
class _State:
    """What the active guards allow, replaced as a whole when a guard starts or ends."""

    allowed: frozenset[tuple[Host, int]]
    hosts: frozenset[Host]
    run_ids: tuple[object, ...]


_lock = threading.Lock()
_entries: list[tuple[frozenset[tuple[Host, int]], object]] = []
_state: _State | None = None
_learned: set[tuple[Host, int]] = set()  # addresses that allowed host names resolved to
_originals: dict[str, Any] = {}
_MISSING = object()


def network_guard(
    *, allow: Iterable[tuple[str, int]] = (), run_id: object = None
) -> contextlib.AbstractContextManager[None]:
    """Refuse outbound network access from this process while the block runs.

    Args:
        allow: (host, port) pairs that stay reachable, e.g. the run store's address.
            "localhost" stands for 127.0.0.1 and ::1. Loopback addresses are refused too
            unless listed: a local model server is as much a live call as a remote one.
        run_id: the run being replayed, named in the error.

    Raises:
        NetworkAccessDuringReplay: (from the guarded calls) on any other destination.
    """
    entry = (frozenset(_allow_entry(item) for item in allow), run_id)
    return _guard(entry)


@contextlib.contextmanager
def _guard(entry: tuple[frozenset[tuple[Host, int]], object]) -> Iterator[None]:
    with _lock:
        if not _entries:
            _install()
        _entries.append(entry)
        _publish()
    try:
        yield
    finally:
        with _lock:
            _entries.remove(entry)
            if _entries:
                _publish()
            else:
                _uninstall()


def _allow_entry(item: object) -> tuple[Host, int]:
    if isinstance(item, (tuple, list)) and len(item) == 2:
        host, port = _parse_host(item[0]), item[1]
        if host is not None and isinstance(port, int):
            return host, port
    raise ValueError(
        f"network_guard(allow=...) takes (host, port) pairs such as ('127.0.0.1', 5432); "
        f"got {item!r}")


def _publish() -> None:
    global _state
    allowed = frozenset().union(*(allow for allow, _ in _entries))
    _state = _State(allowed=allowed, hosts=frozenset(h for h, _ in allowed),
                    run_ids=tuple(dict.fromkeys(r for _, r in _entries if r is not None)))


# -- the rules ------------------------------------------------------------------------------


def _parse_host(host: object) -> Host | None:
    """An IP address, or a normalised host name; None for what is not a host at all."""
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("ascii", "replace")
    if not isinstance(host, str):
        return None
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return text.lower().rstrip(".")
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _aliases(host: Host) -> tuple[Host, ...]:
    return _LOOPBACK_ALIASES if host in _LOOPBACK_ALIASES else (host,)


def _is_loopback(host: Host) -> bool:
    return host == _LOCALHOST if isinstance(host, str) else host.is_loopback


def _may_connect(state: _State, host: Host, port: object) -> bool:
    if not isinstance(port, int):
        return False
    return any((alias, port) in state.allowed for alias in _aliases(host)) \
        or (host, port) in _learned


def _may_resolve(state: _State, host: Host) -> bool:
    # numeric loopback and "localhost" never reach a DNS server; allowed names must resolve
    return _is_loopback(host) or host in state.hosts


def _learn(host: Host, addresses: Iterable[object]) -> None:
    """Let connections reach the addresses an allowed host name resolved to."""
    ports = [p for h, p in _state.allowed if h == host] if _state else []
    for address in addresses:
        parsed = _parse_host(address)
        if parsed is not None:
            _learned.update((parsed, p) for p in ports)


def _refuse(api: str, action: str, destination: str, hint: str) -> NetworkAccessDuringReplay:
    runs = ", ".join(str(r) for r in _state.run_ids) if _state else ""
    during = f"replay of run {runs}" if runs else "replay"
    return NetworkAccessDuringReplay(
        f"{api}: an unrecorded call tried to go live during {during}: it {action} "
        f"{destination}. The network guard blocked it; nothing left this process. To fix "
        "it, record the run again so that this call is recorded and served by a replay "
        f"backend, or, if {destination} is part of your test setup (a local server, the run "
        f"store), allow it: store.replay(..., allow_hosts=[{hint}]) or "
        f"network_guard(allow=[{hint}])."
    )


def _check_socket(sock: socket.socket, address: Any, api: str,
                  action: str = "tried to connect to") -> None:
    state = _state
    if state is None or (_AF_UNIX is not None and sock.family == _AF_UNIX):
        return
    if sock.family in _INET:
        if not (isinstance(address, tuple) and len(address) >= 2):
            return  # not an address at all: the original raises its own TypeError
        host = _parse_host(address[0])
        if host is None or _may_connect(state, host, address[1]):
            return
        raise _refuse(api, action, _show(address[0], address[1]),
                      f"({str(address[0])!r}, {address[1]!r})")
    raise _refuse(api, f"{action} (address family {sock.family!r})", repr(address),
                  "(host, port)")


def _check_lookup(host: object, api: str) -> Host | None:
    state = _state
    if state is None or host is None:  # None: the local host's passive or loopback addresses
        return None
    parsed = _parse_host(host)
    if parsed is None or _may_resolve(state, parsed):
        return parsed  # None: not a host name at all, the original raises its own TypeError
    raise _refuse(api, "tried to resolve", f"host name {host!r}", f"({host!r}, PORT)")


def _show(host: object, port: object) -> str:
    text = str(host)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


# -- the replacements -----------------------------------------------------------------------


def _connect(self: socket.socket, address: Any) -> None:
    _check_socket(self, address, "socket.connect")
    return _originals["connect"](self, address)  # type: ignore[no-any-return]


def _connect_ex(self: socket.socket, address: Any) -> int:
    _check_socket(self, address, "socket.connect_ex")
    return _originals["connect_ex"](self, address)  # type: ignore[no-any-return]


def _sendto(self: socket.socket, data: Any, *args: Any) -> int:
    if args:  # sendto(data, address) or sendto(data, flags, address)
        _check_socket(self, args[-1], "socket.sendto", "tried to send to")
    return _originals["sendto"](self, data, *args)  # type: ignore[no-any-return]


def _create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
    state = _state
    if state is not None and isinstance(address, tuple) and len(address) == 2:
        host = _parse_host(address[0])
        if host is not None and not _may_connect(state, host, address[1]):
            raise _refuse("socket.create_connection", "tried to connect to",
                          _show(address[0], address[1]), f"({address[0]!r}, {address[1]!r})")
    return _originals["create_connection"](address, *args, **kwargs)  # type: ignore[no-any-return]


def _getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                 flags: int = 0) -> list[tuple[Any, ...]]:
    parsed = _check_lookup(host, "socket.getaddrinfo")
    result: list[tuple[Any, ...]] = _originals["getaddrinfo"](host, port, family, type, proto,
                                                              flags)
    if isinstance(parsed, str) and parsed != _LOCALHOST:
        _learn(parsed, (info[4][0] for info in result))
    return result


def _gethostbyname(hostname: str) -> str:
    parsed = _check_lookup(hostname, "socket.gethostbyname")
    address: str = _originals["gethostbyname"](hostname)
    if isinstance(parsed, str):
        _learn(parsed, [address])
    return address


def _gethostbyname_ex(hostname: str) -> tuple[str, list[str], list[str]]:
    parsed = _check_lookup(hostname, "socket.gethostbyname_ex")
    result: tuple[str, list[str], list[str]] = _originals["gethostbyname_ex"](hostname)
    if isinstance(parsed, str):
        _learn(parsed, result[2])
    return result


def _gethostbyaddr(ip_address: str) -> tuple[str, list[str], list[str]]:
    _check_lookup(ip_address, "socket.gethostbyaddr")
    return _originals["gethostbyaddr"](ip_address)  # type: ignore[no-any-return]


def _getnameinfo(sockaddr: Any, flags: int) -> tuple[str, str]:
    if not flags & socket.NI_NUMERICHOST and isinstance(sockaddr, tuple) and sockaddr:
        _check_lookup(sockaddr[0], "socket.getnameinfo")
    return _originals["getnameinfo"](sockaddr, flags)  # type: ignore[no-any-return]


_PATCHES: tuple[tuple[Any, str, Any], ...] = (
    (socket.socket, "connect", _connect),
    (socket.socket, "connect_ex", _connect_ex),
    (socket.socket, "sendto", _sendto),
    (socket, "create_connection", _create_connection),
    (socket, "getaddrinfo", _getaddrinfo),
    (socket, "gethostbyname", _gethostbyname),
    (socket, "gethostbyname_ex", _gethostbyname_ex),
    (socket, "gethostbyaddr", _gethostbyaddr),
    (socket, "getnameinfo", _getnameinfo),
)
_saved: list[tuple[Any, str, object]] = []


def _install() -> None:
    for target, name, replacement in _PATCHES:
        # what the class or module itself holds: an inherited method is deleted again
        _saved.append((target, name, vars(target).get(name, _MISSING)))
        _originals[name] = getattr(target, name)
        setattr(target, name, replacement)


def _uninstall() -> None:
    global _state
    _state = None
    _learned.clear()
    while _saved:
        target, name, original = _saved.pop()
        if original is _MISSING:
            delattr(target, name)
        else:
            setattr(target, name, original)
