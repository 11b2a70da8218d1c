"""A TCP proxy that adds a fixed one-way delay to every byte, each direction: latency without netem.

For kernels built without `sch_netem` (tools/lab/rpc_latency.sh falls back to it there). Each chunk
read from one side is written to the other `delay_ms` after it arrived, in order; bandwidth is not
limited. A round trip through it therefore costs 2 x delay_ms more, as with netem on both ends of
a veth pair. Python adds some 0.05-0.2 ms per chunk of its own; measure delay 0 through the proxy
too, so that it is the baseline.

    python tools/lab/delay_proxy.py --listen 127.0.0.1:50053 --to 10.77.0.2:50052 --delay-ms 1
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(1 << 20)
            queue.put_nowait((loop.time() + delay_s, data))
            if not data:
                break
    except (ConnectionError, OSError):
        queue.put_nowait((loop.time(), b""))
    await sender


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def serve(listen: tuple[str, int], to: tuple[str, int], delay_s: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*to)
        except OSError:
            client_w.close()
            return
        _nodelay(client_w)
        _nodelay(server_w)
        await asyncio.gather(
            _pipe(client_r, server_w, delay_s), _pipe(server_r, client_w, delay_s), return_exceptions=True
        )

    server = await asyncio.start_server(handle, *listen)
    print(
        f"delay proxy {listen[0]}:{listen[1]} -> {to[0]}:{to[1]}, {delay_s * 1000:g} ms each way", flush=True
    )
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    p.add_argument("--to", required=True, help="HOST:PORT to forward to")
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay added in each direction")
    args = p.parse_args()
    try:
        asyncio.run(serve(_address(args.listen), _address(args.to), args.delay_ms / 1000))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
