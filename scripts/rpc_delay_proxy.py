#!/usr/bin/env python3
"""A TCP proxy that delays every message by a fixed time each way: a LAN's latency on loopback.

    scripts/rpc_delay_proxy.py --delay-ms 1 127.0.0.1:51000=127.0.0.1:50052 127.0.0.1:51001=127.0.0.1:50053

Each ``LISTEN=TARGET`` pair forwards connections on LISTEN to TARGET; every chunk read from either
side is written to the other ``--delay-ms`` milliseconds after it arrived (order kept; chunks that
arrive together leave together, as on a link with that one-way latency and ample bandwidth). Used by
``scripts/bench_rpc.py`` in front of ``localspec worker``s (issue: speculation hiding the network).
Runs until stopped; prints one line when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue = asyncio.Queue()
    loop = asyncio.get_running_loop()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(1 << 20)
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0.0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def serve(listen: tuple[str, int], target: tuple[str, int], delay: float) -> asyncio.AbstractServer:
    async def handle(client_r, client_w) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        for sock in (client_w, server_w):
            s = sock.get_extra_info("socket")
            if s is not None:
                import socket

                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pipe(client_r, server_w, delay), pipe(server_r, client_w, delay))

    return await asyncio.start_server(handle, *listen)


def endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay per message, milliseconds")
    p.add_argument("pairs", nargs="+", metavar="LISTEN=TARGET")
    args = p.parse_args(argv)
    servers = []
    for pair in args.pairs:
        listen, _, target = pair.partition("=")
        servers.append(await serve(endpoint(listen), endpoint(target), args.delay_ms / 1000))
    print(f"delaying {args.delay_ms:g} ms each way: {' '.join(args.pairs)}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)
