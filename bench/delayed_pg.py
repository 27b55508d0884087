"""A TCP relay that delays every chunk by a fixed time each way: PostgreSQL "further away".

For measuring what a round trip to the server costs the daemon (bench/throughput.py against
a server a millisecond away) on a machine whose kernel has no ``netem``:

    .venv/bin/python bench/delayed_pg.py --listen 6543 --delay-ms 0.5 &
    COLIBRI_TEST_PG=postgresql://postgres@127.0.0.1:6543/test \\
        .venv/bin/python bench/throughput.py --store postgresql

Each chunk read from either side is written to the other ``--delay-ms`` later, in order: a
round trip through it takes twice that more. It runs in a process of its own (its work is not
the daemon's nor the load's).
"""

from __future__ import annotations

import argparse
import asyncio


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(65536):
            loop.call_later(delay, writer.write, data)
    except ConnectionError:
        pass
    finally:
        await asyncio.sleep(delay)  # what is on its way still arrives
        writer.close()


async def _serve(listen: int, target: tuple[str, int], delay: float) -> None:
    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w, delay), _pipe(server_r, client_w, delay))

    server = await asyncio.start_server(relay, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, default=6543, help="port on 127.0.0.1")
    parser.add_argument("--to", default="127.0.0.1:5432", help="the server, HOST:PORT")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="added each way")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    # (asyncio's own loop: uvloop's timers count whole milliseconds, and would round the delay.)
    asyncio.run(_serve(args.listen, (host, int(port)), args.delay_ms / 1000))


if __name__ == "__main__":
    main()
