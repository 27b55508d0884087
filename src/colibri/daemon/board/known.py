"""What every agent that ever registered offers, per tenant: names, capabilities, workspaces.

Kept so that a submission nothing could ever take is said so at once (``unplaceable``) rather
than accepted in silence: a task pinned to an agent that never registered, for a workspace
nobody serves, or needing capabilities no agent has had. It only grows while the daemon runs
(an agent that went away may come back) and is read again from the store's agents at every
rebuild. A hint, never a refusal: the task is taken and waits, as it always did.
"""

from __future__ import annotations

from collections.abc import Iterable

from colibri.core.matching import Shape
from colibri.core.model import DEFAULT_TENANT, Agent


class KnownAgents:
    def __init__(self, workspaces: Iterable[str]) -> None:
        #: The workspaces of colibri.jsonc: their harnesses register as they start.
        self.workspaces = frozenset(workspaces)
        self._tenant_of: dict[str, str] = {}
        self._capabilities: dict[str, set[str]] = {}
        self._served: dict[str, set[str]] = {}

    def load(self, agents: Iterable[Agent]) -> None:
        self._tenant_of.clear()
        self._capabilities.clear()
        self._served.clear()
        for agent in agents:
            self.remember(agent.name, agent.tenant, agent.capabilities, agent.workspace)

    def remember(
        self, name: str, tenant: str, capabilities: Iterable[str], workspace: str | None
    ) -> None:
        self._tenant_of[name] = tenant
        self._capabilities.setdefault(tenant, set()).update(capabilities)
        if workspace is not None:
            self._served.setdefault(tenant, set()).add(workspace)

    def unplaceable(self, shape: Shape) -> str | None:
        """Why no agent known to this board could take a task of ``shape``, or None."""
        tenant = shape.tenant
        # The workspaces of colibri.jsonc are the default tenant's (their harnesses register
        # there): for another tenant they count as nothing, and are never named to it.
        configured = self.workspaces if tenant == DEFAULT_TENANT else frozenset()
        if shape.pin is not None:
            if self._tenant_of.get(shape.pin) == tenant or shape.pin in configured:
                return None
            return f"no agent named {shape.pin} has registered yet"
        workspace = shape.workspace
        if (
            workspace is not None
            and workspace not in configured
            and workspace not in self._served.get(tenant, ())
        ):
            undefined = (
                ", and colibri.jsonc defines no such workspace" if tenant == DEFAULT_TENANT else ""
            )
            return f"no agent of workspace {workspace} has registered yet{undefined}"
        required = shape.capabilities
        if not required:
            return None
        had = required & self._capabilities.get(tenant, set())
        if not had:
            listed = ", ".join(sorted(required))
            some = "any of " if len(required) > 1 else ""
            return f"no agent has registered with {some}{listed} yet"
        if len(had) / len(required) < shape.min_score:
            lacking = ", ".join(sorted(required - had))
            return (
                f"no agent has registered with {lacking} yet, and the task needs a score of "
                f"{shape.min_score:g}"
            )
        return None
