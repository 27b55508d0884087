"""The errors of start-up, the client and the CLI: raised where they happen, never sent on
the socket."""

from __future__ import annotations

from colibri.core.errors.base import ColibriError, NotFound, Unreached, shown


class ConfigError(ColibriError):
    code = "config_error"


class RootError(ColibriError):
    code = "root_error"


class LockHeld(ColibriError):
    """Another live process holds a process lock (``locks.hold_lock``): a daemon its root's,
    a harness its workspace's. ``holder`` is the pid it wrote there."""

    code = "lock_held"

    def __init__(self, holder: str, message: str) -> None:
        super().__init__(message)
        self.holder = holder


class UnknownWorkspace(NotFound):
    code = "unknown_workspace"

    def __init__(self, name: str, known: list[str]) -> None:
        listed = ", ".join(known) or "none"
        super().__init__(f"colibri.jsonc defines no workspace {shown(name)} (workspaces: {listed})")


class WorkspaceExists(ColibriError):
    code = "workspace_exists"

    def __init__(self, name: str, file: str) -> None:
        super().__init__(f"workspace {name!r} exists already in {file}")


class FileExists(ColibriError):
    """A file a command would write is there already: refused without ``--force``, and a link
    or anything else that is not a regular file even with it."""

    code = "file_exists"


class CopyConflict(ColibriError):
    """``colibri store copy``: a row of the board being copied clashes with one of the target
    board (a task id, an idempotency key in the tenant, a schedule's or an agent's name);
    nothing was copied."""

    code = "copy_conflict"


class NoSession(ColibriError):
    """``attach-session``: the task is not running, or not in a tmux session of this host."""

    code = "no_session"


class BadTaskBody(ColibriError):
    """Text that is not a task body (``core.lineage.parse_body``): a session's task file that
    was overwritten or cut, or a message without a task header."""

    code = "bad_task_body"


class DaemonNotRunning(Unreached):
    code = "no_daemon"

    def __init__(self, root: str) -> None:
        super().__init__(f"no daemon is running for {root} (start one with: colibri run)")

    @classmethod
    def at(cls, addresses: str, why: str) -> DaemonNotRunning:
        made = cls.__new__(cls)
        ColibriError.__init__(made, f"no daemon answers at {addresses}: {why}")
        return made


class TlsFailed(ColibriError):
    """The TLS handshake with the daemon failed: its certificate is not trusted (wrong
    ``--tls-ca``), is not for the host name connected to, or the peer does not speak TLS."""

    code = "tls_failed"


class ConnectionClosed(Unreached):
    """The daemon closed the connection without saying why (a restart, a crash), or the
    connection broke; a request in flight may or may not have been taken."""

    code = "closed"


class UnexpectedReply(ColibriError):
    """A reply the client cannot read: not a JSON object, or an error code this version does
    not know (a daemon of another version of Colibri)."""

    code = "unexpected_reply"


class OsFailure(ColibriError):
    """An operating-system call of the CLI failed: a file it could not read, a socket it may
    not use. The message is the system's, with the path."""

    code = "os_error"
