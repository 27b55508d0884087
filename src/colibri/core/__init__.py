"""The pure core: values in, values out. No I/O, no asyncio, no clock."""
