CREATE TABLE tenants (
    name        TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL
);
CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    text            TEXT NOT NULL,
    capabilities    TEXT NOT NULL,          -- JSON array
    workspace       TEXT,
    agent           TEXT,
    pinned          INTEGER NOT NULL DEFAULT 0,
    parent          TEXT,
    priority        INTEGER NOT NULL DEFAULT 0,
    min_score       REAL,
    state           TEXT NOT NULL,
    outcome         TEXT,
    output          TEXT,
    error           TEXT,
    cost            TEXT,                   -- JSON object
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL DEFAULT 1,
    epoch           INTEGER NOT NULL DEFAULT 0,
    labels          TEXT NOT NULL,          -- JSON array
    idempotency_key TEXT,
    not_before      TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_open ON tasks (state) WHERE state IN ('pending', 'running');
CREATE INDEX tasks_parent ON tasks (parent) WHERE parent IS NOT NULL;
CREATE INDEX tasks_agent ON tasks (agent) WHERE agent IS NOT NULL;
CREATE TABLE agents (
    name          TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    capabilities  TEXT NOT NULL,            -- JSON array
    slots         INTEGER NOT NULL,
    ttl           REAL NOT NULL,
    workspace     TEXT,
    registered_at TEXT NOT NULL,
    last_seen     TEXT
);
CREATE TABLE skills (
    name        TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT ''
);
CREATE TABLE ledger (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         TEXT NOT NULL,
    task       TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    agent      TEXT,
    epoch      INTEGER NOT NULL,
    reason     TEXT,
    cost       TEXT                         -- JSON object
);
CREATE INDEX ledger_task ON ledger (task);
