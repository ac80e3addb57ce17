"""``localspec worker --host``: ggml's RPC server takes only an IPv4 literal (``inet_addr``), so a host
name is resolved to its IPv4 address first (:func:`localspec.backend.rpc.listen_address`) and IPv6 is
refused with a hint before anything starts."""

from __future__ import annotations

import socket

import pytest

from localspec.backend import rpc
from localspec.errors import ConfigError

from cli_runner import run_cli


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "192.168.1.20", " 10.0.0.7 "])
def test_an_ipv4_literal_is_kept(host):
    assert rpc.listen_address(host) == host.strip()


def test_localhost_becomes_an_ipv4_literal():
    addr = rpc.listen_address("localhost")
    assert addr.startswith("127.") and socket.inet_aton(addr)


@pytest.mark.parametrize("host", ["::1", "[::1]", "fe80::1", "::"])
def test_an_ipv6_address_is_refused_with_a_hint(host):
    with pytest.raises(ConfigError, match="IPv6") as e:
        rpc.listen_address(host)
    assert "127.0.0.1" in e.value.hint and "IPv4 only" in e.value.hint


def test_a_name_with_only_ipv6_addresses_says_so(monkeypatch):
    def getaddrinfo(host, port, family=0, *a, **k):
        if family == socket.AF_INET:
            raise socket.gaierror(socket.EAI_NONAME, "no address")
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(ConfigError, match="only IPv6"):
        rpc.listen_address("v6only.example")


def test_a_name_that_does_not_resolve_is_named(monkeypatch):
    def getaddrinfo(*a, **k):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(ConfigError, match="no-such-host.*cannot resolve"):
        rpc.listen_address("no-such-host")


def test_the_worker_command_refuses_ipv6_before_starting(capsys):
    code, out, err = run_cli(capsys, "worker", "--host", "::1", "--port", "50052")
    assert code != 0 and "IPv6" in err and "127.0.0.1" in err and "localspec worker on" not in err
