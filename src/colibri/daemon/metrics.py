"""Prometheus metrics of the daemon (``colibri run --metrics HOST:PORT``; docs/METRICS.md).

Two kinds, both on the daemon's loop thread, so nothing here needs a lock:

- what *happened* — submissions, outcomes, assignments, spend, commits — is counted from the
  ledger rows of each batch, once the store has committed it (``Metrics.committed``, called by
  ``Server.flush``): a batch rolled back counts nothing, as it never happened;
- what *is* — tasks by state, agents online, sessions running, ready pools, and the counts the
  board, the schedules and the supervisor already keep — is read from memory at scrape time
  (``_BoardCollector``), so the daemon does no work for it between scrapes.

The endpoint is a small HTTP responder on the same loop (``MetricsEndpoint``): a scrape runs
``generate_latest`` between two loop turns, never while a batch is half done.

Labels are bounded: a state, an outcome, a workspace, a schedule — never a task or agent id.
This module imports ``prometheus_client``; ``app.compose`` imports this module only when
metrics are asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from colibri.core.errors import ConfigError
from colibri.core.model import LedgerEntry, parse_rfc3339
from colibri.core.states import OUTCOMES, State
from colibri.endpoints import TcpAddress, parse_metrics_address

if TYPE_CHECKING:
    from colibri.daemon.board import Board
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.daemon.supervisor import Supervisor

log = logging.getLogger(__name__)

#: Seconds from a submission to its first assignment: a queue that is served at once, up to
#: tasks that wait hours for an agent.
ASSIGN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900,
                  3600, 4 * 3600)  # fmt: skip
#: Seconds one store commit takes (an fsync on SQLite, a round trip on PostgreSQL).
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
#: The states a task of the open board can be in (closed tasks leave memory).
OPEN_BOARD = (State.PENDING, State.RUNNING, State.DONE, State.FAILED, State.CANCELLED)
#: A request head longer than this, or slower than ``REQUEST_TIMEOUT``, is dropped unanswered.
MAX_HEAD = 8192
REQUEST_TIMEOUT = 10.0
#: Header lines read at most before a request is dropped.
MAX_HEADERS = 100
#: Connections at once (Prometheus sends one scrape at a time); past it, a newcomer takes the
#: place of the one that has waited longest without a whole request, as on the daemon's socket.
MAX_CLIENTS = 16


class Metrics:
    """The registry (of its own: nothing else of the process ends up in it) and its metrics."""

    def __init__(self, board: Board, schedules: ScheduleRunner, supervisor: Supervisor) -> None:
        self.board = board
        # No ``_created`` series beside each counter: they would double a scrape to say when
        # the daemon started. (The setting is the process's; its one registry is this one.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        r = self.registry
        self.submitted = Counter(
            "colibri_tasks_submitted", "Tasks submitted (by clients, schedules, hand-offs).",
            registry=r,
        )  # fmt: skip
        self.finished = Counter(
            "colibri_tasks_finished", "Tasks that reached an outcome.", ["outcome"], registry=r
        )
        for outcome in sorted(OUTCOMES):
            self.finished.labels(outcome.value)  # present at 0, so rate() has a start
        self.assigned = Counter(
            "colibri_tasks_assigned", "Assignments of tasks to agents (a retry is another).",
            registry=r,
        )  # fmt: skip
        self.assign_latency = Histogram(
            "colibri_submit_to_assign_seconds",
            "Seconds from a task's submission to its first assignment.",
            buckets=ASSIGN_BUCKETS, registry=r,
        )  # fmt: skip
        self.spend_usd = Counter(
            "colibri_spend_usd", "Dollars that sessions reported spending.", ["workspace"],
            registry=r,
        )  # fmt: skip
        self.spend_tokens = Counter(
            "colibri_spend_tokens", "Tokens that sessions reported using.",
            ["workspace", "direction"], registry=r,
        )  # fmt: skip
        self.commit_latency = Histogram(
            "colibri_store_commit_seconds",
            "Seconds each store commit of a batch with ledger rows took.",
            buckets=COMMIT_BUCKETS, registry=r,
        )  # fmt: skip
        r.register(_BoardCollector(board, schedules, supervisor))

    def committed(self, rows: list[LedgerEntry], seconds: float) -> None:
        """A batch is in the store: count what its ledger rows say happened."""
        if not rows:
            return  # most often nothing to commit (a sweep, a heartbeat): not a commit's time
        self.commit_latency.observe(seconds)
        for row in rows:
            if row.task is None:
                continue  # a schedule's note: its counts are the schedule's own
            if row.from_state is None:
                self.submitted.inc()
            elif row.to_state == State.RUNNING:
                self.assigned.inc()
                if row.epoch == 1:
                    self._first_assignment(row)
            elif row.to_state in OUTCOMES:
                self.finished.labels(row.to_state).inc()
            if row.cost is not None:
                workspace = self._workspace_of(row)
                if row.cost.usd:
                    self.spend_usd.labels(workspace).inc(row.cost.usd)
                if row.cost.tokens_in:
                    self.spend_tokens.labels(workspace, "in").inc(row.cost.tokens_in)
                if row.cost.tokens_out:
                    self.spend_tokens.labels(workspace, "out").inc(row.cost.tokens_out)

    def _first_assignment(self, row: LedgerEntry) -> None:
        task = self.board.tasks.get(row.task or "")
        if task is not None:
            waited = parse_rfc3339(row.at) - parse_rfc3339(task.created_at)
            self.assign_latency.observe(max(0.0, waited))  # a wall clock set back: 0

    def _workspace_of(self, row: LedgerEntry) -> str:
        """Whose budget a cost is counted to, as ``Capacity.spend`` does: the task's
        workspace, else its agent's; "" for neither."""
        task = self.board.tasks.get(row.task or "")
        if task is not None and task.workspace is not None:
            return task.workspace
        agent = self.board.agents.get(row.agent or "")
        return (agent.workspace if agent is not None else None) or ""

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _BoardCollector(Collector):
    """Gauges and kept counts, read from the daemon's memory at each scrape."""

    def __init__(self, board: Board, schedules: ScheduleRunner, supervisor: Supervisor) -> None:
        self.board = board
        self.schedules = schedules
        self.supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        board = self.board
        states = Tally(task.state for task in board.tasks.values())
        tasks = GaugeMetricFamily(
            "colibri_tasks", "Tasks on the open board, by state.", labels=["state"]
        )
        for state in OPEN_BOARD:
            tasks.add_metric([state.value], states.get(state.value, 0))
        yield tasks
        yield GaugeMetricFamily(
            "colibri_tasks_retrying",
            "Pending tasks waiting out a retry's backoff.",
            value=len(board.queue.delayed),
        )
        yield GaugeMetricFamily(
            "colibri_tasks_blocked",
            "Pending tasks waiting for other tasks (after) to end.",
            value=len(board.dependencies.waiting),
        )
        yield GaugeMetricFamily(
            "colibri_dispatch_paused", "1 while dispatch is paused.", value=int(board.paused)
        )
        # Every workspace of colibri.jsonc is present, at 0 when none of its agents is there.
        workspaces = dict.fromkeys(self.supervisor.harnesses, 0)
        online, running, ready = dict(workspaces), dict(workspaces), dict(workspaces)
        for agent in board.agents.values():
            where = agent.workspace or ""
            running[where] = running.get(where, 0) + len(agent.holding)
            ready[where] = ready.get(where, 0) + agent.ready
            if agent.online:
                online[where] = online.get(where, 0) + 1
        yield _gauge("colibri_agents_online", "Agents online, by workspace.", online)
        yield _gauge("colibri_sessions_running", "Sessions running, by workspace.", running)
        yield _gauge(
            "colibri_ready_sessions",
            "Warm sessions waiting in the agents' ready pools, by workspace (as of their last "
            "heartbeat).",
            ready,
        )
        capacity = board.capacity
        yield _counter(
            "colibri_ready_timeouts",
            "Sessions that never became ready (requeued), by workspace (or agent).",
            capacity.warnings,
        )
        yield _counter(
            "colibri_breaker_trips",
            "Circuit breakers opened (sessions in a row never ready), by workspace (or agent).",
            capacity.breaker_trips,
        )
        harnesses = self.supervisor.harnesses.values()
        yield _counter(
            "colibri_harness_restarts",
            "Harnesses started again after they exited, by workspace.",
            {h.workspace: h.restarts for h in harnesses},
        )
        now = self.supervisor.clock.monotonic()
        yield _gauge(
            "colibri_harness_degraded",
            "1 while a workspace's harness is left alone after a crash loop.",
            {h.workspace: int(now < h.degraded_until) for h in harnesses},
        )
        schedules = self.schedules.schedules.values()
        for name, help_text, counts in (
            ("fires", "Tasks submitted by schedules' fires.", {s.name: s.fires for s in schedules}),
            ("missed", "Schedules' fires missed (the daemon was down, catch_up).",
             {s.name: s.missed for s in schedules}),
            ("skipped", "Schedules' fires skipped (overlap skip).",
             {s.name: s.skipped for s in schedules}),
            ("refused", "Schedules' fires refused by intake (a quota, a budget).",
             {s.name: s.refused for s in schedules}),
        ):  # fmt: skip
            yield _counter(f"colibri_schedule_{name}", help_text, counts, label="schedule")


def _gauge(name: str, help_text: str, values: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["workspace"])
    for key in sorted(values):
        family.add_metric([key], values[key])
    return family


def _counter(
    name: str, help_text: str, values: dict[str, int], label: str = "workspace"
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=[label])
    for key in sorted(values):
        family.add_metric([key], values[key])
    return family


class MetricsEndpoint:
    """``GET /metrics`` over plain HTTP/1.1, one request per connection, on the daemon's loop."""

    def __init__(self, metrics: Metrics, address: str) -> None:
        self.metrics = metrics
        self.address = parse_metrics_address(address)
        self._server: asyncio.Server | None = None
        #: The connections being answered, oldest first, and whether each has sent its request.
        self._clients: dict[asyncio.Task[None], bool] = {}
        #: Where it listens, as bound (a port 0 replaced by the one given).
        self.bound: TcpAddress | None = None

    @property
    def url(self) -> str:
        assert self.bound is not None
        host = f"[{self.bound.host}]" if ":" in self.bound.host else self.bound.host
        return f"http://{host}:{self.bound.port}/metrics"

    async def start(self) -> None:
        host, port = self.address.host, self.address.port
        try:
            self._server = await asyncio.start_server(self._answer, host, port, limit=MAX_HEAD)
        except OSError as exc:
            # asyncio words a failed bind at length; the system's words for its errno suffice
            # (a name that does not resolve has a negative one, and its own words).
            why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {why or exc}; pick another address or "
                "port (--metrics, server.metrics)"
            ) from None
        bound = self._server.sockets[0].getsockname()
        self.bound = TcpAddress(host, int(bound[1]))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._clients) >= MAX_CLIENTS:
            silent = next((t for t, asked in self._clients.items() if not asked), None)
            if silent is None:  # every one is being answered: the newcomer waits its turn
                writer.close()
                return
            silent.cancel()  # peers that connect and say nothing cannot keep a scrape out
            del self._clients[silent]
        me = asyncio.current_task()
        assert me is not None
        self._clients[me] = False
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                request = await _read_head(reader)
                if me in self._clients:
                    self._clients[me] = True
                status, headers, body = self._respond(request)
                writer.write(
                    f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n".encode()
                )
                if request is None or request[0] != "HEAD":
                    writer.write(body)
                await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # a client that hung up or dawdled: nothing to tell it
        except asyncio.CancelledError:
            pass  # made room for a newcomer (the daemon's stop closes the server, not these)
        finally:
            self._clients.pop(me, None)
            writer.close()

    def _respond(self, request: tuple[str, str] | None) -> tuple[str, str, bytes]:
        text = "Content-Type: text/plain; charset=utf-8\r\n"
        if request is None:
            return "400 Bad Request", text, b"not an HTTP request\n"
        method, path = request
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text + "Allow: GET, HEAD\r\n", b"GET /metrics\n"
        if path == "/metrics":
            try:
                body = self.metrics.exposition()
            except Exception:
                # A fault of ours in one scrape must not take the daemon down: say so, serve on.
                log.exception("metrics scrape failed", extra={"event": "internal_error"})
                return "500 Internal Server Error", text, b"the scrape failed; see the log\n"
            return "200 OK", f"Content-Type: {CONTENT_TYPE_LATEST}\r\n", body
        if path == "/":
            return "200 OK", text, b"Colibri daemon: Prometheus metrics at /metrics\n"
        return "404 Not Found", text, b"not found: the metrics are at /metrics\n"


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """The method and path of a request (its headers read and ignored); None if it is not
    one. A head longer than the reader's limit raises ``ValueError``."""
    first = await reader.readline()
    for _ in range(MAX_HEADERS):
        if await reader.readline() in (b"\r\n", b"\n", b""):
            break
    else:
        return None
    with contextlib.suppress(UnicodeDecodeError):
        parts = first.decode("ascii").split()
        if len(parts) == 3 and parts[2].startswith("HTTP/1."):
            return parts[0], parts[1].partition("?")[0]
    return None
