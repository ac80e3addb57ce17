"""llama.cpp's RPC backend: workers on other machines that hold a model's layers.

A worker (``localspec worker``, :func:`serve_worker`) is ggml's ``rpc-server`` run from the same
libggml as localspec itself (``ggml_backend_rpc_start_server``), so the protocol versions match by
construction. A model loaded with ``rpc`` endpoints (:func:`connect_workers`, then
:class:`~localspec.backend.llama.LlamaModel` ``devices=``) puts its offloaded layers on the workers;
every forward pass then pays network round trips, which speculation amortises (one verification pass
checks many drafted tokens).

llama.cpp's RPC client aborts the whole process (``GGML_ABORT``) when it cannot connect, when the
handshake fails, or when a worker is lost mid-pass. So each worker is first checked here, in Python,
with a bounded timeout (:func:`check_worker`: TCP connect, then the protocol's HELLO handshake, whose
reply carries the worker's protocol version): a worker that is down, refuses, is busy with another
client, or speaks another version is a :class:`~localspec.errors.WorkerError` naming it, before
llama.cpp is asked to connect.

The wire format (ggml-rpc.cpp, protocol 7): a request is ``cmd`` (1 byte) | ``size`` (uint64 LE) |
payload; a reply is ``size`` (uint64 LE) | payload. HELLO is command 14 (fixed across versions); its
request payload is 24 bytes of transport capabilities (zeros: plain TCP), its reply is
major, minor, patch, padding (1 byte each) and 24 bytes of capabilities.

Security: a worker has no authentication and runs whatever graph it is sent; it binds to loopback
unless told otherwise, and must only ever be reachable from trusted machines.
"""

from __future__ import annotations

import ctypes
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from localspec.rpc_endpoints import parse_endpoint
from localspec.errors import ConfigError, WorkerError

#: the RPC protocol of the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml-rpc.h:
#: RPC_PROTO_MAJOR_VERSION 7, MINOR 0); a worker must have the same major and a minor <= ours
RPC_PROTOCOL = (7, 0)
#: ggml-rpc's HELLO command number (``static_assert(RPC_CMD_HELLO == 14)`` in ggml-rpc.cpp)
RPC_CMD_HELLO = 14
#: bytes of transport capabilities in a HELLO request and reply (``RPC_CONN_CAPS_SIZE``)
RPC_CONN_CAPS_SIZE = 24
#: seconds allowed to connect to a worker and to hear its HELLO reply
CONNECT_TIMEOUT = 5.0
#: ggml's device type of a CPU (``GGML_BACKEND_DEVICE_TYPE_CPU``)
_DEVICE_CPU = 0
#: the build hint for a llama-cpp-python without the RPC backend (docs/machines.md, "More than one machine")
REBUILD_HINT = ('rebuild llama-cpp-python with the RPC backend: CMAKE_ARGS="-DGGML_RPC=ON" pip install '
                '--force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36')


def check_worker(endpoint: str, timeout: float = CONNECT_TIMEOUT) -> tuple[int, int, int]:
    """Connect to a worker and do the HELLO handshake; its protocol version (major, minor, patch).

    The connection is closed afterwards: a worker serves one client at a time, and llama.cpp
    connects next.

    Raises:
        WorkerError: down, refused, unreachable or silent within ``timeout`` seconds, closed the
            connection (another llama.cpp version's handshake), or a protocol version this build
            cannot use. The message names ``endpoint``.
    """
    host, port = parse_endpoint(endpoint)
    start_hint = f"start one there with: localspec worker --host {host} --port {port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        raise WorkerError(f"RPC worker {endpoint} did not answer within {timeout:g} s",
                          f"check the address and any firewall between the machines; {start_hint}") from None
    except ConnectionRefusedError:
        raise WorkerError(f"RPC worker {endpoint} refused the connection (nothing listens on that port)",
                          start_hint) from None
    except OSError as e:
        raise WorkerError(f"cannot reach RPC worker {endpoint}: {e.strerror or e}",
                          f"check the host name and the network; {start_hint}") from None
    with sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(struct.pack("<BQ", RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE))
            head = _recv_exactly(sock, 8)
            (size,) = struct.unpack("<Q", head)
            if size < 3 or size > 4096:
                raise WorkerError(f"RPC worker {endpoint} answered the handshake with {size} bytes: not a "
                                  "llama.cpp RPC worker of a known version", _same_build_hint())
            reply = _recv_exactly(sock, size)
        except socket.timeout:
            raise WorkerError(f"RPC worker {endpoint} accepted the connection but did not answer the handshake "
                              f"within {timeout:g} s (busy with another client, or not a llama.cpp worker)",
                              "a worker serves one client at a time: stop the other client, or start another "
                              "worker") from None
        except (ConnectionError, EOFError, OSError):
            raise WorkerError(f"RPC worker {endpoint} closed the connection during the handshake: it speaks another "
                              "llama.cpp RPC protocol version, or is not a llama.cpp worker",
                              _same_build_hint()) from None
    version = tuple(reply[:3])
    if version[0] != RPC_PROTOCOL[0] or version[1] > RPC_PROTOCOL[1]:
        raise WorkerError(f"RPC worker {endpoint} speaks protocol {'.'.join(map(str, version))}; this build speaks "
                          f"{RPC_PROTOCOL[0]}.{RPC_PROTOCOL[1]}", _same_build_hint())
    return version  # type: ignore[return-value]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _same_build_hint() -> str:
    return ("start the worker from the same localspec installation (localspec worker): the protocol is versioned "
            "and both ends must come from the same llama.cpp")


# -- the native side: ggml's backend registry, by ctypes on llama-cpp-python's libggml -------------

_ggml = None


def _lib() -> ctypes.CDLL:
    """llama-cpp-python's libggml (already loaded by llama_cpp; the same handle), with the
    registry functions typed."""
    global _ggml
    if _ggml is None:
        from localspec.backend.llama import _llama

        libdir = Path(_llama().__file__).parent / "lib"
        names = [p for p in ("libggml.so", "libggml.dylib", "ggml.dll") if (libdir / p).exists()]
        if not names:  # pragma: no cover - an unusual install
            raise WorkerError(f"libggml not found in {libdir}", REBUILD_HINT)
        lib = ctypes.CDLL(str(libdir / names[0]), mode=getattr(ctypes, "RTLD_GLOBAL", 0))
        vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        for name, res, args in (
            ("ggml_backend_reg_by_name", vp, [cp]), ("ggml_backend_reg_get_proc_address", vp, [vp, cp]),
            ("ggml_backend_register", None, [vp]), ("ggml_backend_reg_dev_count", sz, [vp]),
            ("ggml_backend_reg_dev_get", vp, [vp, sz]), ("ggml_backend_dev_name", cp, [vp]),
            ("ggml_backend_dev_description", cp, [vp]), ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
            ("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]), ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_reg_name", cp, [vp]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _ggml = lib
    return _ggml


def supported() -> bool:
    """Whether this llama-cpp-python was built with llama.cpp's RPC backend (``-DGGML_RPC=ON``)."""
    from localspec.backend.llama import _ensure_init, _llama

    _ensure_init()
    return bool(_llama().llama_supports_rpc())


def require_support() -> None:
    """Raises:
        ConfigError: this build has no RPC backend; the hint is the rebuild command."""
    if not supported():
        raise ConfigError("this llama-cpp-python was built without llama.cpp's RPC backend", REBUILD_HINT)


def _rpc_proc(name: str):
    lib = _lib()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise ConfigError("llama.cpp's RPC backend is not registered in this build", REBUILD_HINT)
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not addr:  # pragma: no cover - another llama.cpp generation
        raise ConfigError(f"this llama.cpp's RPC backend has no {name}", REBUILD_HINT)
    return addr


@dataclass(frozen=True)
class Worker:
    """A connected worker: its endpoint, protocol version and ggml devices (``ggml_backend_dev_t``)."""

    endpoint: str
    version: tuple[int, int, int]
    devices: tuple[int, ...]
    device_names: tuple[str, ...]


_workers: dict[str, Worker] = {}


def connect_workers(endpoints: tuple[str, ...], timeout: float = CONNECT_TIMEOUT) -> list[Worker]:
    """Check each worker (:func:`check_worker`) and register it with ggml's backend registry
    (``ggml_backend_rpc_add_server``, ``ggml_backend_register``); once per endpoint per process.

    Raises:
        ConfigError: no RPC backend in this build.
        WorkerError: a worker is down, refuses, is busy or speaks another protocol (named).
    """
    require_support()
    out = []
    for endpoint in endpoints:
        if endpoint in _workers:
            out.append(_workers[endpoint])
            continue
        version = check_worker(endpoint, timeout)
        add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(_rpc_proc("ggml_backend_rpc_add_server"))
        reg = add_server(endpoint.encode())
        if not reg:
            raise WorkerError(f"llama.cpp could not use RPC worker {endpoint} (it reports no device)",
                              _same_build_hint())
        lib = _lib()
        lib.ggml_backend_register(reg)
        devs = tuple(int(lib.ggml_backend_reg_dev_get(reg, i)) for i in range(lib.ggml_backend_reg_dev_count(reg)))
        names = tuple(lib.ggml_backend_dev_name(d).decode() for d in devs)
        _workers[endpoint] = Worker(endpoint, version, devs, names)
        out.append(_workers[endpoint])
    return out


def local_devices() -> list[int]:
    """The non-CPU ggml devices of this machine (GPUs), RPC workers excluded: where a model
    without ``rpc`` may offload layers once workers are registered (llama.cpp would use every
    registered device otherwise)."""
    lib = _lib()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        if lib.ggml_backend_dev_type(dev) == _DEVICE_CPU:
            continue
        reg = lib.ggml_backend_dev_backend_reg(dev)
        if reg and lib.ggml_backend_reg_name(reg) == b"RPC":
            continue
        out.append(int(dev))
    return out


def listen_address(host: str) -> str:
    """The IPv4 literal a worker listens on for ``--host host``: an IPv4 literal as given, a host name
    (``localhost``, a machine's name) resolved to its first IPv4 address.

    ggml's RPC server (``ggml_backend_rpc_start_server``) reads its address with ``inet_addr``: it takes
    only an IPv4 literal and binds no IPv6 socket; handed a name it fails after localspec has printed
    its banner. So names are resolved here, and IPv6 is refused before anything starts.

    Raises:
        ConfigError: an IPv6 address (or a name with no IPv4 address), or a name that does not resolve;
            the hint says what to pass instead.
    """
    import ipaddress

    text = host.strip().strip("[]")
    if not text:
        raise ConfigError("--host is empty", "use --host 127.0.0.1 (this machine only) or this machine's IPv4 address")
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        addr = None
    if isinstance(addr, ipaddress.IPv4Address):
        return str(addr)
    ipv6_hint = ("llama.cpp's RPC server listens on IPv4 only: use --host 127.0.0.1 (this machine only), this "
                 "machine's IPv4 address, or 0.0.0.0 (every IPv4 interface); reach it over IPv6 through a tunnel "
                 "(ssh -L 50052:127.0.0.1:50052 box)")
    if addr is not None:
        raise ConfigError(f"--host {host}: an IPv6 address; a worker cannot listen on IPv6", ipv6_hint)
    try:
        infos = socket.getaddrinfo(text, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        try:  # a name with only IPv6 addresses: say so, not "unknown"
            has_v6 = bool(socket.getaddrinfo(text, None, socket.AF_INET6, socket.SOCK_STREAM))
        except socket.gaierror:
            has_v6 = False
        if has_v6:
            raise ConfigError(f"--host {host} has only IPv6 addresses; a worker cannot listen on IPv6",
                              ipv6_hint) from None
        raise ConfigError(f"--host {host}: cannot resolve the name ({e.strerror or e})",
                          "use an IPv4 address such as 127.0.0.1, or a name this machine resolves") from None
    return infos[0][4][0]


def serve_worker(host: str, port: int, n_threads: int, cache_dir: str | None = None) -> None:
    """Serve this machine's CPU to RPC clients until the process is stopped (blocks in C).

    Raises:
        ConfigError: no RPC backend in this build.
    """
    require_support()
    lib = _lib()
    cpu = lib.ggml_backend_dev_by_type(_DEVICE_CPU)
    devices = (ctypes.c_void_p * 1)(cpu)
    start = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                             ctypes.c_void_p)(_rpc_proc("ggml_backend_rpc_start_server"))
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, n_threads, 1,
          ctypes.cast(devices, ctypes.c_void_p))
