"""The MCP SDK's own client, talking to ``colibri mcp`` spawned as a subprocess on stdio."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.helpers import COVERAGE_ENV, PYTHON

if TYPE_CHECKING:  # the SDK takes half a second to import: only the tests that use it pay
    from mcp.client.session import ClientSession


@asynccontextmanager
async def mcp_session(
    log: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with ``colibri ARGS mcp`` (its stderr in ``log``); ``env`` is
    added to what the SDK passes on, which is not our environment (no COLIBRI_*)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=PYTHON,
        args=["-m", "colibri", *args, "mcp"],
        env={**COVERAGE_ENV, **(env or {})},
        cwd=cwd,
    )
    with open(log, "w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; the call must succeed."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # The text content says the same, for clients that read only text.
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


async def refusal(session: ClientSession, tool: str, **arguments: Any) -> dict[str, str]:
    """The Colibri error a tool call ends in, from both its structured and its text content."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error
    doc = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert doc == result.structured_content and doc["ok"] is False
    return doc["error"]
