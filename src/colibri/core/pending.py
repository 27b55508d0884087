"""The pending tasks waiting for an agent, in dispatch order, grouped by shape.

Order: higher priority first, then first in, first out. With ageing (``scheduler.ageing``, a
duration A), a task gains one priority point per A seconds of waiting, so a low priority never
starves. Because every waiting task gains at the same rate, ageing is a fixed sort key —
``priority - created_at / A`` — and nothing is re-sorted as time passes.

Tasks of one shape (capabilities, workspace, pin, min_score) are placed alike, so a dispatch
pass asks the matcher once per shape, not once per task: when a shape's best task cannot be
placed, the whole shape is skipped for that pass, and the tasks behind it in other shapes go on
(no head-of-line blocking). A pass costs O(shapes + placed · log shapes).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from colibri.core.matching import Shape

SortKey = tuple[float, str]


def sort_key(priority: int, created_at: float, task_id: str, ageing: float | None) -> SortKey:
    """Smaller sorts first. Ids are time-ordered (UUIDv7), so they break ties first-in first-out."""
    if ageing:
        return (created_at / ageing - priority, task_id)
    return (-float(priority), task_id)


class PendingTasks:
    def __init__(self) -> None:
        self._shape_of: dict[str, Shape] = {}
        #: Per shape, a heap of sort keys; a key ends with its task id.
        self._heaps: dict[Shape, list[SortKey]] = {}

    def __len__(self) -> int:
        return len(self._shape_of)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._shape_of

    def add(self, task_id: str, shape: Shape, key: SortKey) -> None:
        if task_id in self._shape_of:
            return
        self._shape_of[task_id] = shape
        assert key[-1] == task_id
        heapq.heappush(self._heaps.setdefault(shape, []), key)

    def discard(self, task_id: str) -> None:
        """Forget a task (claimed, cancelled); its heap entry is dropped lazily."""
        self._shape_of.pop(task_id, None)

    def _head(self, shape: Shape) -> SortKey | None:
        heap = self._heaps.get(shape)
        while heap:
            key = heap[0]
            if self._shape_of.get(key[-1]) == shape:
                return key
            heapq.heappop(heap)
        self._heaps.pop(shape, None)
        return None

    def placements(self, pick: Callable[[Shape], str | None]) -> Iterator[tuple[str, str]]:
        """Yield ``(task_id, agent)`` in dispatch order while ``pick`` finds agents.

        The caller claims each pair before asking for the next (so ``pick`` sees the slot
        taken); a task yielded here is already removed.
        """
        order: list[tuple[SortKey, int, Shape]] = []
        for n, shape in enumerate(list(self._heaps)):
            head = self._head(shape)
            if head is not None:
                order.append((head, n, shape))
        heapq.heapify(order)
        while order:
            _, n, shape = heapq.heappop(order)
            agent = pick(shape)
            if agent is None:
                continue
            head = self._head(shape)
            if head is None:
                continue
            task_id = head[-1]
            heapq.heappop(self._heaps[shape])
            del self._shape_of[task_id]
            yield task_id, agent
            nxt = self._head(shape)
            if nxt is not None:
                heapq.heappush(order, (nxt, n, shape))
