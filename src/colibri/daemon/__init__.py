"""The daemon: asyncio around the pure core and the store, one process per root."""
