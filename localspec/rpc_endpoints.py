"""Where llama.cpp's RPC workers listen, and how long they may take: the ``HOST:PORT`` rule and the timeouts
that the model settings (``--rpc``, ``--rpc-timeout``), the RPC backend and ``localspec worker`` share.

It sits below :mod:`localspec.config` (which declares the options with these defaults) and imports nothing of
localspec's, so every layer can read it.
"""

from __future__ import annotations

#: the port llama.cpp's rpc-server (and ``localspec worker``) listens on by default
RPC_DEFAULT_PORT = 50052
#: seconds a one-token pass on RPC workers may take before they count as stalled (``--rpc-timeout``)
RPC_TIMEOUT = 60.0
#: a pass of m tokens on RPC workers may take ``rpc_timeout * (1 + m / RPC_TIMEOUT_TOKENS)`` seconds
RPC_TIMEOUT_TOKENS = 32
#: seconds the model's process may go without a word while it starts and loads on RPC workers, at least
#: (starting Python and llama.cpp; llama.cpp reports progress after each tensor it sends)
RPC_LOAD_SILENCE = 60.0
#: seconds a cancelled pass on RPC workers may go on before its model's process is ended (llama.cpp's abort
#: callback reaches only its CPU backend: a pass waiting on a stalled worker never sees it); the model then
#: loads again before the next generation, as after ``--rpc-timeout``
RPC_CANCEL_GRACE = 2.0


def parse_endpoint(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> (host, port); a host name or an IPv4 address (llama.cpp's RPC client
    splits at the first colon, so IPv6 addresses cannot be written).

    Raises:
        ValueError: no port, a port outside 1..65535, an empty host or an IPv6 address.
    """
    text = text.strip()
    host, sep, port = text.partition(":")
    if not sep or not host:
        raise ValueError(f"RPC worker {text!r} is not HOST:PORT (for example 192.168.1.20:{RPC_DEFAULT_PORT})")
    if ":" in port or host.startswith("["):
        raise ValueError(f"RPC worker {text!r}: llama.cpp's RPC takes a host name or an IPv4 address, not IPv6")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"RPC worker {text!r}: the port must be a number 1..65535")
    return host, int(port)


def split_endpoints(value: object) -> tuple[str, ...]:
    """Endpoints from a comma-separated string or a list of them (each may hold commas too),
    checked by :func:`parse_endpoint`, duplicates refused.

    Raises:
        ValueError: a malformed or repeated endpoint.
    """
    items = [value] if isinstance(value, str) else list(value or ())
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                parse_endpoint(part)
                if part.strip() in out:
                    raise ValueError(f"RPC worker {part.strip()} is given twice")
                out.append(part.strip())
    return tuple(out)
