"""A byte-counting TCP proxy in front of the API server, one listening port per client.

TLS passes through untouched (the client still verifies the API server's certificate and
authenticates with its own), so the counts are the bytes on the wire, TLS framing
included, in each direction. Only the measured client connects to its port.

    python -m scale.proxy --upstream 127.0.0.1:16443 --listen operator=41001 \
        --listen janitor=41002 --control 41000

Prints one JSON line when listening. A connection to the control port receives the
counters as one JSON object: {name: {"up": bytes, "down": bytes, "connections": n}}.
Only the standard library; a separate process so that it never shares a GIL with the
benchmark's own threads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections import defaultdict
from functools import partial

Counters = dict[str, dict[str, int]]


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: dict[str, int], key: str
) -> None:
    try:
        while data := await reader.read(1 << 16):
            counts[key] += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _serve(
    upstream: tuple[str, int],
    counts: dict[str, int],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(*upstream)
    except OSError:
        writer.close()
        return
    counts["connections"] += 1
    await asyncio.gather(
        _pump(reader, up_writer, counts, "up"), _pump(up_reader, writer, counts, "down")
    )


async def _control(
    counters: Counters, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    writer.write(json.dumps(counters).encode() + b"\n")
    await writer.drain()
    writer.close()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="host:port of the API server")
    parser.add_argument("--listen", action="append", required=True, help="name=port")
    parser.add_argument("--control", type=int, required=True)
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    upstream = (host, int(port))
    counters: Counters = {}
    servers = []
    for spec in args.listen:
        name, _, listen_port = spec.partition("=")
        counts: dict[str, int] = defaultdict(int, up=0, down=0, connections=0)
        counters[name] = counts
        handler = partial(_serve, upstream, counts)
        servers.append(await asyncio.start_server(handler, "127.0.0.1", int(listen_port)))
    servers.append(
        await asyncio.start_server(partial(_control, counters), "127.0.0.1", args.control)
    )
    print(json.dumps({"listening": sorted(counters)}), flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
