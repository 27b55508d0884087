"""Submit several tasks at once and wait for all of them, with asyncio.

    python examples/client_async.py ~/fleet

Needs a daemon on that root and an agent with the capability ``python``.
"""

from __future__ import annotations

import asyncio
import sys

from colibri import AsyncClient


async def main(root: str) -> None:
    # One connection carries every request; the waits do not hold up the others.
    async with AsyncClient.for_root(root) as board:
        shards = await asyncio.gather(
            *(board.submit(f"test shard {n}", capabilities=["python"]) for n in range(3))
        )
        for ended in await asyncio.gather(*(board.wait(t.id) for t in shards)):
            print(f"{ended.text}: {ended.outcome}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "."))
