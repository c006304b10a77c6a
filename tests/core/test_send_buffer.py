"""Store connections over a Unix-domain socket buffer a whole batch for sending (so the writer
thread does not wait on the socket, and then on the GIL, a dozen times per batch); TCP
connections keep the kernel's autotuning."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from agentreplay_core.stores._pgconn import SEND_BUFFER, widen_send_buffer
from agentreplay_core.stores._postgres import PostgresBackend

WMEM_MAX = Path("/proc/sys/net/core/wmem_max")
pytestmark = pytest.mark.skipif(not WMEM_MAX.exists(), reason="Linux's socket buffer limits")


def send_buffer(fd: int) -> tuple[int, int]:
    """(address family, SO_SNDBUF) of the socket behind `fd`."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return sock.family, sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def widened() -> int:
    """What Linux makes of the request: capped at wmem_max, then doubled for its overhead."""
    return 2 * min(SEND_BUFFER, int(WMEM_MAX.read_text()))


def test_a_unix_socket_gets_the_larger_buffer() -> None:
    a, b = socket.socketpair()
    with a, b:
        _, before = send_buffer(a.fileno())
        widen_send_buffer(a.fileno())
        assert send_buffer(a.fileno())[1] == max(before, widened())
        widen_send_buffer(a.fileno())  # again: nothing changes, nothing fails
        assert send_buffer(a.fileno())[1] == max(before, widened())
        a.sendall(b"still usable")
        assert b.recv(100) == b"still usable"


def test_a_tcp_socket_is_left_to_autotuning() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        _, before = send_buffer(client.fileno())
        widen_send_buffer(client.fileno())
        assert send_buffer(client.fileno())[1] == before


def test_not_a_socket_is_ignored(tmp_path: Path) -> None:
    with open(tmp_path / "file", "wb") as f:
        widen_send_buffer(f.fileno())
    widen_send_buffer(987_654)  # no such descriptor


def test_store_connections_over_a_unix_socket_have_it(backend: PostgresBackend) -> None:
    with backend._connection("inspect a pooled connection") as conn:
        family, size = send_buffer(conn.fileno())
    if family != socket.AF_UNIX:
        pytest.skip("AGENTREPLAY_TEST_DSN is a TCP server: its buffer is the kernel's to size")
    assert size == widened()
