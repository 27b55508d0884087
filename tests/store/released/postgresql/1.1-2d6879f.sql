CREATE TABLE colibri_schema (
    version     INTEGER NOT NULL
);
INSERT INTO colibri_schema (version) VALUES (0);
CREATE TABLE tenants (
    name        TEXT COLLATE "C" PRIMARY KEY,
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE tasks (
    id              TEXT COLLATE "C" PRIMARY KEY,
    tenant          TEXT COLLATE "C" NOT NULL,
    text            TEXT NOT NULL,
    capabilities    TEXT NOT NULL,          -- JSON array
    workspace       TEXT COLLATE "C",
    agent           TEXT COLLATE "C",
    pinned          INTEGER NOT NULL DEFAULT 0,
    parent          TEXT COLLATE "C",
    sender          TEXT COLLATE "C",
    priority        BIGINT NOT NULL DEFAULT 0,
    min_score       DOUBLE PRECISION,
    state           TEXT COLLATE "C" NOT NULL,
    outcome         TEXT COLLATE "C",
    output          TEXT,
    error           TEXT,
    cost            TEXT,                   -- JSON object
    attempts        BIGINT NOT NULL DEFAULT 0,
    max_attempts    BIGINT NOT NULL DEFAULT 1,
    epoch           BIGINT NOT NULL DEFAULT 0,
    labels          TEXT NOT NULL,          -- JSON array
    idempotency_key TEXT COLLATE "C",
    not_before      TEXT COLLATE "C",
    schedule        TEXT COLLATE "C",
    question        TEXT,
    budget_usd      DOUBLE PRECISION,
    created_at      TEXT COLLATE "C" NOT NULL,
    updated_at      TEXT COLLATE "C" NOT NULL,
    fingerprint     TEXT
);
CREATE UNIQUE INDEX tasks_idempotency ON tasks (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_open ON tasks (state) WHERE state <> 'closed';
CREATE INDEX tasks_parent ON tasks (parent) WHERE parent IS NOT NULL;
CREATE INDEX tasks_agent ON tasks (agent) WHERE agent IS NOT NULL;
CREATE TABLE agents (
    name          TEXT COLLATE "C" PRIMARY KEY,
    tenant        TEXT COLLATE "C" NOT NULL,
    capabilities  TEXT NOT NULL,            -- JSON array
    slots         BIGINT NOT NULL,
    ttl           DOUBLE PRECISION NOT NULL,
    workspace     TEXT COLLATE "C",
    registered_at TEXT COLLATE "C" NOT NULL,
    last_seen     TEXT COLLATE "C"
);
CREATE TABLE skills (
    name        TEXT COLLATE "C" PRIMARY KEY,
    description TEXT NOT NULL DEFAULT ''
);
-- seq is assigned by the store, not by a sequence: a rolled-back row gives its number back.
CREATE TABLE ledger (
    seq        BIGINT PRIMARY KEY,
    at         TEXT COLLATE "C" NOT NULL,
    task       TEXT COLLATE "C",
    schedule   TEXT COLLATE "C",
    tenant     TEXT COLLATE "C" NOT NULL,
    from_state TEXT COLLATE "C",
    to_state   TEXT COLLATE "C" NOT NULL,
    agent      TEXT COLLATE "C",
    epoch      BIGINT NOT NULL,
    reason     TEXT,
    cost       TEXT,                        -- JSON object
    uid        BIGINT,
    pid        BIGINT
);
CREATE INDEX ledger_task ON ledger (task);
CREATE TABLE schedules (
    name         TEXT COLLATE "C" PRIMARY KEY,
    next_fire_at TEXT COLLATE "C",
    doc          TEXT NOT NULL
);
CREATE TABLE schedule_fires (
    schedule TEXT COLLATE "C" NOT NULL,
    nominal  TEXT COLLATE "C" NOT NULL,
    outcome  TEXT COLLATE "C" NOT NULL,
    task     TEXT COLLATE "C",
    at       TEXT COLLATE "C" NOT NULL,
    reason   TEXT,
    PRIMARY KEY (schedule, nominal)
);
CREATE TABLE meta (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value BYTEA NOT NULL
);
CREATE TABLE tokens (
    id           TEXT COLLATE "C" PRIMARY KEY,
    tenant       TEXT COLLATE "C" NOT NULL,
    role         TEXT COLLATE "C" NOT NULL,
    agent        TEXT COLLATE "C",
    capabilities TEXT NOT NULL,             -- JSON array
    workspace    TEXT COLLATE "C",
    secret_hash  TEXT NOT NULL,
    created_at   TEXT COLLATE "C" NOT NULL,
    expires_at   TEXT COLLATE "C",
    revoked_at   TEXT COLLATE "C",
    last_used_at TEXT COLLATE "C"
);
