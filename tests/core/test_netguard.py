"""The network guard: during replay nothing leaves the process but what is allowed.

No test sends traffic to a non-loopback address: `no_egress` puts tripwires in front of the
real socket functions (beneath the guard), so a guard that let a call through would fail the
test instead of reaching the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import NetworkAccessDuringReplay
from agentreplay_core._netguard import network_guard

EXTERNAL = ("203.0.113.1", 443)  # TEST-NET-3: documentation only, never routed
UNKNOWN_NAME = "agentreplay-test.invalid"
PATCHED = [
    (socket.socket, "connect"), (socket.socket, "connect_ex"), (socket.socket, "sendto"),
    (socket, "create_connection"), (socket, "getaddrinfo"), (socket, "gethostbyname"),
    (socket, "gethostbyname_ex"), (socket, "gethostbyaddr"), (socket, "getnameinfo"),
]


def _is_local(host: object) -> bool:
    if isinstance(host, str) and host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


class Tripwire(AssertionError):
    """A call reached the real network functions although the guard should have refused it."""


@pytest.fixture
def no_egress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the real socket functions refuse non-loopback destinations with `Tripwire`."""

    def wrap_socket_method(name: str) -> None:
        real = getattr(socket.socket, name)

        def tripwire(self: socket.socket, *args: Any) -> Any:
            address = args[-1]
            if self.family != socket.AF_UNIX and not _is_local(address[0]):
                raise Tripwire(f"socket.{name}{args!r} reached the network")
            return real(self, *args)

        monkeypatch.setattr(socket.socket, name, tripwire)

    def wrap_lookup(name: str) -> None:
        real: Callable[..., Any] = getattr(socket, name)

        def tripwire(host: Any, *args: Any) -> Any:
            target = host[0] if isinstance(host, tuple) else host
            numeric = name == "getnameinfo" and args[0] & socket.NI_NUMERICHOST
            if target is not None and not numeric and not _is_local(target):
                raise Tripwire(f"socket.{name}({host!r}) reached the network")
            return real(host, *args)

        monkeypatch.setattr(socket, name, tripwire)

    for method in ("connect", "connect_ex", "sendto"):
        wrap_socket_method(method)
    for lookup in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr",
                   "getnameinfo"):
        wrap_lookup(lookup)


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A TCP echo server on 127.0.0.1; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.sendall(conn.recv(1024))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def _echo(host: str, port: int) -> bytes:
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.sendall(b"ping")
        return conn.recv(1024)


def test_connections_to_external_addresses_are_refused(no_egress: None) -> None:
    run_id = uuid.uuid4()
    with network_guard(run_id=run_id):
        with pytest.raises(NetworkAccessDuringReplay) as refused:
            socket.create_connection(EXTERNAL, timeout=1)
        with socket.socket() as sock, pytest.raises(NetworkAccessDuringReplay):
            sock.connect(EXTERNAL)
        with socket.socket() as sock, pytest.raises(NetworkAccessDuringReplay):
            sock.connect_ex(EXTERNAL)
        with socket.socket(socket.AF_INET6) as sock, pytest.raises(NetworkAccessDuringReplay):
            sock.connect(("::ffff:203.0.113.1", 443, 0, 0))
        with socket.socket(type=socket.SOCK_DGRAM) as sock, \
                pytest.raises(NetworkAccessDuringReplay) as sent:
            sock.sendto(b"query", ("203.0.113.1", 53))
    message = str(refused.value)
    assert "203.0.113.1:443" in message
    assert str(run_id) in message
    assert "unrecorded call tried to go live during replay" in message
    assert "record the run again" in message
    assert "allow_hosts=[('203.0.113.1', 443)]" in message
    assert "send to 203.0.113.1:53" in str(sent.value)
    assert isinstance(refused.value, ConnectionError)  # what network code already handles


def test_loopback_is_refused_unless_allowed(no_egress: None, echo_server: int) -> None:
    with network_guard(run_id="r"), pytest.raises(NetworkAccessDuringReplay) as refused:
        _echo("127.0.0.1", echo_server)
    assert f"127.0.0.1:{echo_server}" in str(refused.value)
    with network_guard(allow=[("127.0.0.1", echo_server + 1)]), \
            pytest.raises(NetworkAccessDuringReplay):
        _echo("127.0.0.1", echo_server)  # another port of the same host
    with network_guard(allow=[("127.0.0.1", echo_server)]):
        assert _echo("127.0.0.1", echo_server) == b"ping"
    with network_guard(allow=[("localhost", echo_server)]):
        assert _echo("localhost", echo_server) == b"ping"
        assert _echo("127.0.0.1", echo_server) == b"ping"


def test_unix_sockets_work(no_egress: None, tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        with network_guard(run_id="r"), socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
            conn, _ = server.accept()
            with conn:
                client.sendall(b"hello")
                assert conn.recv(16) == b"hello"


def test_name_lookups_are_refused_but_loopback_resolves(no_egress: None) -> None:
    refused: list[Callable[[], object]] = [
        lambda: socket.getaddrinfo(UNKNOWN_NAME, 443),
        lambda: socket.getaddrinfo("203.0.113.1", 443),
        lambda: socket.gethostbyname(UNKNOWN_NAME),
        lambda: socket.gethostbyname_ex(UNKNOWN_NAME),
        lambda: socket.gethostbyaddr("203.0.113.1"),
        lambda: socket.getnameinfo(("203.0.113.1", 443), 0),
        lambda: socket.create_connection((UNKNOWN_NAME, 443)),
    ]
    with network_guard(run_id="r"):
        for call in refused:
            with pytest.raises(NetworkAccessDuringReplay, match=r"\.invalid|203\.0\.113\.1"):
                call()
        assert socket.getaddrinfo("127.0.0.1", 80)[0][4] == ("127.0.0.1", 80)
        assert socket.getaddrinfo("::1", 80)[0][4][:2] == ("::1", 80)
        assert socket.getaddrinfo("localhost", 80)
        assert socket.gethostbyname("localhost")
        assert socket.getnameinfo(("203.0.113.1", 443), socket.NI_NUMERICHOST
                                  | socket.NI_NUMERICSERV) == ("203.0.113.1", "443")


def test_allowed_host_name_reaches_the_addresses_it_resolves_to(
    monkeypatch: pytest.MonkeyPatch, echo_server: int
) -> None:
    """A store reached by name (db.example:5432) works: the name resolves, then connects."""
    real = socket.getaddrinfo

    def resolver(host: Any, port: Any, *args: Any) -> Any:  # stands in for DNS
        return real("127.0.0.1" if host == "store.example" else host, port, *args)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    with network_guard(allow=[("store.example", echo_server)]):
        assert _echo("store.example", echo_server) == b"ping"
        with pytest.raises(NetworkAccessDuringReplay):
            _echo("store.example", 1)  # only the allowed port
    with network_guard(), pytest.raises(NetworkAccessDuringReplay):
        _echo("127.0.0.1", echo_server)  # what was learned ends with the guard


def test_asyncio_connections_are_guarded(no_egress: None, echo_server: int) -> None:
    async def echo(host: str, port: int) -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"ping")
        data = await reader.read(1024)
        writer.close()
        await writer.wait_closed()
        return data

    with network_guard(allow=[("127.0.0.1", echo_server)], run_id="r"):
        with pytest.raises(NetworkAccessDuringReplay, match=r"203\.0\.113\.1:443"):
            asyncio.run(echo(*EXTERNAL))
        with pytest.raises(NetworkAccessDuringReplay, match=re.escape(UNKNOWN_NAME)):
            asyncio.run(echo(UNKNOWN_NAME, 443))  # resolved in the loop's executor thread
        assert asyncio.run(echo("127.0.0.1", echo_server)) == b"ping"


def test_threads_are_guarded(no_egress: None) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            socket.create_connection(EXTERNAL, timeout=1)
        except BaseException as exc:
            errors.append(exc)

    with network_guard(run_id="r"):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(10)
    assert len(errors) == 1
    assert isinstance(errors[0], NetworkAccessDuringReplay)


def _patched_attributes() -> list[object]:
    return [getattr(target, name) for target, name in PATCHED]


def test_everything_is_restored_after_exit(echo_server: int) -> None:
    before = _patched_attributes()
    with network_guard():
        assert not any(a is b for a, b in zip(before, _patched_attributes(), strict=True))
    assert all(a is b for a, b in zip(before, _patched_attributes(), strict=True))
    assert "connect" not in vars(socket.socket)  # inherited from _socket.socket again
    assert _echo("127.0.0.1", echo_server) == b"ping"
    with pytest.raises(RuntimeError), network_guard():
        raise RuntimeError("the body failed")
    assert all(a is b for a, b in zip(before, _patched_attributes(), strict=True))


def test_guards_nest_and_overlap(no_egress: None, echo_server: int) -> None:
    before = socket.getaddrinfo
    with network_guard(run_id="outer"):
        with network_guard(allow=[("127.0.0.1", echo_server)], run_id="inner"):
            assert _echo("127.0.0.1", echo_server) == b"ping"
            with pytest.raises(NetworkAccessDuringReplay) as refused:
                socket.create_connection(EXTERNAL)
            assert "run outer, inner" in str(refused.value)
        with pytest.raises(NetworkAccessDuringReplay):
            _echo("127.0.0.1", echo_server)
    assert socket.getaddrinfo is before

    # two threads whose guards overlap without nesting
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[str] = []

    def first() -> None:
        with network_guard(run_id="a"):
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with network_guard(run_id="b"):
            second_in.set()
            first_out.wait(5)
            try:
                socket.create_connection(EXTERNAL)
            except NetworkAccessDuringReplay as exc:
                seen.append(str(exc))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 1
    assert "replay of run b:" in seen[0]
    assert socket.getaddrinfo is before


def test_allow_takes_host_port_pairs() -> None:
    with pytest.raises(ValueError, match=r"\(host, port\) pairs"):
        network_guard(allow=[("127.0.0.1",)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"\(host, port\) pairs"):
        network_guard(allow=[("127.0.0.1", "5432")])  # type: ignore[list-item]
