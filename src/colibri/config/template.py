"""What ``colibri init`` writes: a commented colibri.jsonc whose values are the defaults."""

from __future__ import annotations

import string

from colibri.config.settings import (
    LedgerSettings,
    SchedulerSettings,
    ServerSettings,
    SupervisorSettings,
)
from colibri.core.durations import format_duration

_TEMPLATE = string.Template("""\
// Colibri configuration. JSONC: comments and trailing commas are allowed.
// Durations are written like 90s, 15m, 1h30m or 1d.
{
  "scheduler": {
    // Safety-net pass over the pending tasks. Dispatch itself is event-driven: a task is
    // assigned the moment an agent that fits it has a free slot.
    "tick": "$tick",
    // An agent silent for longer than this is offline (agents may register their own ttl).
    "agent_ttl": "$agent_ttl",
    // Lowest acceptable capability score, 0..1 (1 = every required capability).
    "min_score": $min_score,
    // Optional: a waiting task gains one priority point per this duration, so low
    // priorities never starve. Off when absent.
    // "ageing": "5m",
    // First wait before a retry (tasks with max_attempts > 1); it doubles per attempt.
    "retry_backoff": "$retry_backoff",
    // Most sessions this host's workspaces run at once, whatever their slots (default:
    // twice the CPUs), so a burst of tasks cannot fork-bomb the machine.
    // "max_sessions": 8,
    // Quotas: most pending tasks per tenant, most children per task (quota_exceeded past them),
    // most MiB of task text a tenant's open tasks may hold (fractions allowed), and most
    // ancestors a task may have (a deeper hand-off or --parent chain is refused).
    // "max_pending": $max_pending,
    // "max_children": $max_children,
    // "max_pending_mib": $max_pending_mib,
    // "max_depth": $max_depth,
  },
  "server": {
    // Longest request line accepted on the socket, in bytes.
    "max_line": $max_line,
    // Most concurrent connections on the Unix socket; more are told "busy" and closed.
    "max_connections": $max_connections,
    // A connection holding an unfinished request line for longer than this is closed.
    "line_timeout": "$line_timeout",
    // A connection that is neither an agent nor a subscriber, silent this long, is closed.
    // "idle_timeout": "$idle_timeout",
    // A Unix group whose members may use the daemon too (socket 0660, state folder 0710);
    // unset, only the user running the daemon may.
    // "socket_group": "colibri",
    // Listen on TCP too, for agents and operators on other machines (docs/REMOTE.md): TLS
    // with this certificate and key, each connection showing a token (colibri token create).
    // "listen": ["tcp://0.0.0.0:7433"],
    // "tls_cert": "/etc/colibri/server.pem",
    // "tls_key": "/etc/colibri/server.key",
    // A TCP peer that has not finished TLS and shown its token by then is dropped; an address
    // with this many failed logins in a minute is refused (throttled) for the rest of it.
    // "handshake_timeout": "$handshake_timeout",
    // "auth_failures": $auth_failures,
    // TCP peers that have shown a token have room of their own, apart from max_connections
    // (the Unix socket's, so the owner always gets in): remote_connections in all, of which
    // one token may hold token_connections and one tenant's tokens tenant_connections (kept
    // below remote_connections: one tenant always leaves room for the others). Waits still to
    // be answered and ledger follows are capped per token and per tenant the same way; past a
    // cap the request is told "busy", naming the setting.
    // "remote_connections": $remote_connections,
    // "token_connections": $token_connections,
    // "tenant_connections": $tenant_connections,
    // "token_waits": $token_waits,
    // "tenant_waits": $tenant_waits,
    // "token_follows": $token_follows,
    // "tenant_follows": $tenant_follows,
    // Serve Prometheus metrics at http://HOST:PORT/metrics (docs/METRICS.md); plain HTTP, so
    // keep it on loopback or a private address.
    // "metrics": "127.0.0.1:9464",
  },
  "store": {
    // "full": an acknowledged task survives power loss (fsync per commit).
    // "relaxed": survives a crash of the daemon, not of the machine.
    "durability": "full",
  },
  "ledger": {
    // .colibri/ledger.jsonl past this many MiB (fractions allowed) is renamed ledger.jsonl.1,
    // older files move up one (.1 to .2 …) and a new ledger.jsonl is started. 0: never.
    // `kill -USR1 <daemon pid>` rotates at once (the pid: colibri status).
    "rotate_mib": $rotate_mib,
    // Rotated files kept (ledger.jsonl.1 … .N); the oldest beyond this are deleted.
    "keep": $keep,
  },
  // Optional, with these defaults: a workspace's harness that exits is started again after
  // 1s, 2s, 4s … up to max_backoff; one that exits crash_loop times within crash_window is
  // marked degraded and left alone for cool_down. Its log, .colibri/harness/NAME.log, past
  // harness_log_mib becomes NAME.log.1 (0: never). A harness whose daemon is gone (no daemon
  // runs for this root) for orphan_after stops its sessions and exits.
  // "supervisor": { "max_backoff": "$max_backoff", "crash_loop": $crash_loop,
  //                 "crash_window": "$crash_window", "cool_down": "$cool_down",
  //                 "harness_log_mib": $harness_log_mib, "orphan_after": "$orphan_after" },
}
""")


def _template() -> str:
    """``colibri init``'s colibri.jsonc: its values are the defaults above, written out."""
    sd, sv, su, ld = SchedulerSettings(), ServerSettings(), SupervisorSettings(), LedgerSettings()
    return _TEMPLATE.substitute(
        tick=format_duration(sd.tick), agent_ttl=format_duration(sd.agent_ttl),
        min_score=f"{sd.min_score:g}", retry_backoff=format_duration(sd.retry_backoff),
        max_pending=sd.max_pending, max_children=sd.max_children,
        max_pending_mib=f"{sd.max_pending_mib:g}", max_depth=sd.max_depth,
        max_line=sv.max_line, max_connections=sv.max_connections,
        line_timeout=format_duration(sv.line_timeout),
        idle_timeout=format_duration(sv.idle_timeout),
        handshake_timeout=format_duration(sv.handshake_timeout), auth_failures=sv.auth_failures,
        remote_connections=sv.remote_connections, token_connections=sv.token_connections,
        tenant_connections=sv.tenant_connections, token_waits=sv.token_waits,
        tenant_waits=sv.tenant_waits, token_follows=sv.token_follows,
        tenant_follows=sv.tenant_follows,
        rotate_mib=f"{ld.rotate_mib:g}", keep=ld.keep,
        max_backoff=format_duration(su.max_backoff), crash_loop=su.crash_loop,
        crash_window=format_duration(su.crash_window), cool_down=format_duration(su.cool_down),
        harness_log_mib=f"{su.harness_log_mib:g}", orphan_after=format_duration(su.orphan_after),
    )  # fmt: skip


TEMPLATE = _template()
