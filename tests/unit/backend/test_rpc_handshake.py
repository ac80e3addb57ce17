"""RPC workers checked before llama.cpp connects (it aborts the process on a failed connection):
endpoints parsed, and a worker that is down, silent, closes, or speaks another protocol version is a
WorkerError naming it, within the timeout. Fake workers are plain sockets speaking ggml-rpc's HELLO."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from localspec.server.process import free_port
from localspec.backend import rpc
from localspec.config import ModelSettings
from localspec.rpc_endpoints import parse_endpoint, split_endpoints
from localspec.errors import WorkerError


def fake_worker(reply):
    """A one-connection TCP server on loopback; ``reply(conn)`` handles the connection. Returns the endpoint."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def run():
        with srv:
            conn, _ = srv.accept()
            with conn:
                reply(conn)

    threading.Thread(target=run, daemon=True).start()
    return f"127.0.0.1:{port}"


def hello_reply(major, minor, patch):
    def reply(conn):
        cmd = conn.recv(1)
        (size,) = struct.unpack("<Q", conn.recv(8))
        assert cmd == bytes([rpc.RPC_CMD_HELLO]) and size == rpc.RPC_CONN_CAPS_SIZE
        conn.recv(size)
        conn.sendall(struct.pack("<Q", 4 + rpc.RPC_CONN_CAPS_SIZE) + bytes([major, minor, patch, 0])
                     + bytes(rpc.RPC_CONN_CAPS_SIZE))
    return reply


def test_endpoints_parse_and_split():
    assert parse_endpoint("box.lan:50052") == ("box.lan", 50052)
    assert split_endpoints("a:1, b:2") == ("a:1", "b:2")
    assert split_endpoints(["a:1,b:2", "c:3"]) == ("a:1", "b:2", "c:3")
    assert ModelSettings(model="m", rpc="10.0.0.2:50052").rpc == ("10.0.0.2:50052",)
    for bad, why in (("box", "HOST:PORT"), ("box:0", "1..65535"), ("box:http", "1..65535"), ("[::1]:5", "IPv6"),
                     (":5", "HOST:PORT")):
        with pytest.raises(ValueError, match=why):
            parse_endpoint(bad)
    with pytest.raises(ValueError, match="twice"):
        split_endpoints("a:1,a:1")


def test_a_worker_of_this_protocol_passes():
    assert rpc.check_worker(fake_worker(hello_reply(*rpc.RPC_PROTOCOL, 3)), timeout=5) == (*rpc.RPC_PROTOCOL, 3)


@pytest.mark.parametrize("version", [(rpc.RPC_PROTOCOL[0] + 1, 0, 0), (rpc.RPC_PROTOCOL[0], rpc.RPC_PROTOCOL[1] + 1, 0),
                                     (3, 0, 0)])
def test_another_protocol_version_is_named(version):
    ep = fake_worker(hello_reply(*version))
    with pytest.raises(WorkerError, match=f"{ep} speaks protocol {'.'.join(map(str, version))}") as e:
        rpc.check_worker(ep, timeout=5)
    assert "localspec worker" in e.value.hint


def test_a_worker_that_is_down_is_named_at_once():
    ep = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=f"{ep} refused") as e:
        rpc.check_worker(ep, timeout=30)
    assert time.monotonic() - t0 < 5  # at once: far inside the 30 s a silent address would be given
    assert "localspec worker --host 127.0.0.1" in e.value.hint


def test_a_worker_that_closes_during_the_handshake_is_named():
    ep = fake_worker(lambda conn: conn.recv(1))
    with pytest.raises(WorkerError, match=f"{ep} closed the connection during the handshake"):
        rpc.check_worker(ep, timeout=5)


def test_a_silent_worker_times_out_within_the_bound():
    done = threading.Event()
    ep = fake_worker(lambda conn: done.wait(10))
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=f"{ep} accepted the connection but did not answer"):
        rpc.check_worker(ep, timeout=0.5)
    done.set()
    assert time.monotonic() - t0 < 3


def test_an_unknown_host_is_named():
    with pytest.raises(WorkerError, match="no-such-host.invalid:50052"):
        rpc.check_worker("no-such-host.invalid:50052", timeout=2)
