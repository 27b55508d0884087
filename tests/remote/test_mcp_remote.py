"""``colibri mcp`` for a daemon on another machine: the address, the CA and a token in the
server's environment, as docs/SUPERVISING.md registers it; the token's tenant and role hold."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.mcp_client import call, mcp_session, refusal
from tests.remote.conftest import TlsDaemon


def test_the_tools_act_with_the_token_given_in_the_environment(
    tls_daemon: TlsDaemon, tmp_path: Path
) -> None:
    operator = tls_daemon.token("operator", tenant="team-a")
    agent = tls_daemon.token("agent", tenant="team-a", agent="build-7")
    other = tls_daemon.submit("not team-a's", tenant="default")

    async def drive() -> None:
        log = tmp_path / "mcp.log"
        async with mcp_session(log, env=tls_daemon.client_env(operator), cwd=tmp_path) as session:
            task = (await call(session, "submit", text="scrub the pool"))["task"]
            assert task["tenant"] == "team-a"
            listed = await call(session, "list")
            assert [t["id"] for t in listed["tasks"]] == [task["id"]]  # its tenant's only
            error = await refusal(session, "show", task_id=other["id"])
            assert error["code"] == "unknown_task"
            assert (await call(session, "cancel", task_id=task["id"]))["cancelled"] == [task["id"]]
        async with mcp_session(log, env=tls_daemon.client_env(agent), cwd=tmp_path) as session:
            error = await refusal(session, "cancel", task_id=other["id"])
            assert error["code"] == "forbidden" and "operator token" in error["message"]
        bad = {**tls_daemon.client_env(operator), "COLIBRI_TOKEN": "colibri_nope_nope"}
        async with mcp_session(log, env=bad, cwd=tmp_path) as session:
            error = await refusal(session, "status")
            assert error["code"] == "unauthorized"

    asyncio.run(drive())
    assert tls_daemon.task(other["id"])["state"] == "pending"
