"""Paged reads: tasks and ledger rows read from the store a page at a time, so that a long
reply is never built whole, and cut before it passes ``sizes.REPLY_BUDGET`` bytes."""

from __future__ import annotations

from dataclasses import replace

from colibri.core import cursor, sizes
from colibri.core.access import Principal
from colibri.core.model import LedgerEntry, Task
from colibri.core.replies import LedgerPage
from colibri.daemon.board import Board
from colibri.store import TaskFilter

#: Tasks and ledger rows read from the store at a time for one reply.
LIST_PAGE = 64
LEDGER_PAGE = 500
#: What one request of a token reads at most, all of it its tenant's: ``ledger`` rows and
#: ``list`` tasks (a page each, a few milliseconds of the loop), ``family`` members by bytes of
#: reply. The others wait behind one request at most (``Server.may_serve``): it must be short.
#: The client goes on from ``next`` (``family``: by ``list`` and ``parent``).
LEDGER_SCAN = LEDGER_PAGE
TOKEN_LIST = 500
TOKEN_FAMILY_BYTES = sizes.REPLY_BUDGET // 8


def past(query: TaskFilter, last: str) -> TaskFilter:
    """``query`` from beyond ``last`` on, in its order: the next page's filter."""
    return replace(query, before=last) if query.newest else replace(query, after=last)


def task_page(board: Board, query: TaskFilter) -> tuple[list[Task], bool]:
    """Up to ``query.limit`` tasks, fewer when they would pass REPLY_BUDGET bytes, and whether
    they are every match left (no next page)."""
    tasks: list[Task] = []
    used = 0
    while len(tasks) < query.limit:
        want = min(LIST_PAGE, query.limit - len(tasks))
        page = board.list_tasks(replace(query, limit=want))
        for task in page:
            used += sizes.task_size(task)
            if tasks and used > sizes.REPLY_BUDGET:
                return tasks, False
            tasks.append(task)
        if len(page) < want:
            return tasks, True
        last = page[-1].id
        query = past(query, last)
    return tasks, False


def ledger_page(
    board: Board, principal: Principal, after: str, limit: int, task: str | None
) -> LedgerPage:
    """The ``ledger`` reply: up to ``limit`` rows beyond the cursor ``after`` (of ``task``'s
    only, if given) that ``principal`` sees, fewer when they would pass REPLY_BUDGET; ``next``
    is where the next page starts — of the tenants ``principal`` sees only, so that no reply
    tells a tenant how far another's ledger runs — and ``more`` whether rows may follow."""
    tenant = principal.tenant
    if after == cursor.END:
        heads = board.store.ledger_heads()
        at = heads if tenant is None else {tenant: heads.get(tenant, 0)}
        return LedgerPage(entries=[], next=cursor.render(at), more=False)
    position = cursor.parse(after)
    if tenant is not None:
        position = {tenant: position.get(tenant, 0)}
    rows: list[LedgerEntry] = []
    used = 0
    full = False
    # A token reads its tenant's rows only, by an index (what a read costs is its own
    # rows, not the board's), and a bounded number of them per request: the client asks
    # again from ``next``, and the others' requests are served in between.
    budget = None if principal.is_owner else LEDGER_SCAN
    while len(rows) < limit and not full:
        want = min(LEDGER_PAGE, limit - len(rows))
        page = board.store.ledger(position, want, task, tenant)
        if budget is not None:
            budget -= len(page)
        for row in page:
            if principal.sees(row.tenant):
                used += sizes.ledger_size(row)
                full = bool(rows) and used > sizes.REPLY_BUDGET
                if full:
                    break
                rows.append(row)
            position[row.tenant] = row.seq
        if len(page) < want:
            break
        if budget is not None and budget <= 0:
            full = True  # more may follow: the client goes on from ``next``
            break
    more = full or (len(rows) == limit and bool(board.store.ledger(position, 1, task, tenant)))
    return LedgerPage(entries=rows, next=cursor.render(position), more=more)
