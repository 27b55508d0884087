-- Named blocks: "-- name: NAME" starts a block; colibri.store.sql loads them by name.
-- Migrations are the blocks named migration_N, applied in order; PRAGMA user_version = N after.

-- name: migration_1
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
    sender          TEXT,
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
    schedule        TEXT,
    question        TEXT,
    budget_usd      REAL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_open ON tasks (state) WHERE state <> 'closed';
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
    task       TEXT,                        -- NULL for a schedule's missed or skipped fire
    schedule   TEXT,
    tenant     TEXT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    agent      TEXT,
    epoch      INTEGER NOT NULL,
    reason     TEXT,
    cost       TEXT                         -- JSON object
);
CREATE INDEX ledger_task ON ledger (task);
CREATE TABLE schedules (
    name         TEXT PRIMARY KEY,
    next_fire_at TEXT,                      -- nominal, RFC 3339 UTC; NULL when finished
    doc          TEXT NOT NULL              -- the whole schedule object, JSON
);
CREATE TABLE schedule_fires (
    schedule TEXT NOT NULL,
    nominal  TEXT NOT NULL,                 -- the nominal fire time: one row per time, ever
    outcome  TEXT NOT NULL,                 -- fired | skipped | missed
    task     TEXT,
    at       TEXT NOT NULL,
    PRIMARY KEY (schedule, nominal)
) WITHOUT ROWID;

-- name: migration_2
-- Who made each change: the uid and pid of the peer whose request it was (SO_PEERCRED).
ALTER TABLE ledger ADD COLUMN uid INTEGER;
ALTER TABLE ledger ADD COLUMN pid INTEGER;

-- name: migration_3
-- Why a fire was refused (its outcome 'refused': intake refused the task).
ALTER TABLE schedule_fires ADD COLUMN reason TEXT;
-- What a submission with an idempotency key asked for, so that the key reused with other
-- fields is refused instead of answered with the first task.
ALTER TABLE tasks ADD COLUMN fingerprint TEXT;
-- Secrets of the board: 'claim_key' signs each claim (a session proves its reports with it).
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);

-- name: migration_4
-- Tokens of agents and operators on other machines: the SHA-256 of each secret, never the
-- secret itself.
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    role         TEXT NOT NULL,
    agent        TEXT,
    capabilities TEXT NOT NULL,             -- JSON array
    workspace    TEXT,
    secret_hash  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT
) WITHOUT ROWID;

-- name: migration_5
-- A tenant's reads cost by its own rows: its ledger in seq order (ledger --follow, a token's
-- ledger and cost), its tasks in id order (a token's list, its id prefixes).
CREATE INDEX IF NOT EXISTS ledger_tenant ON ledger (tenant, seq);
CREATE INDEX IF NOT EXISTS tasks_tenant ON tasks (tenant, id);

-- name: migration_6
-- Ids by their end, as the CLI and the TUI show them (their last 8 characters): the ids that
-- end with the same 4 characters as a suffix given, then of its tenant (a token's).
CREATE INDEX IF NOT EXISTS tasks_tail ON tasks (substr(id, length(id) - 3), tenant);

-- name: migration_7
-- Tasks that wait for others (their ids, a JSON array, and what becomes of them when one
-- fails), the branch or commit a task's worktree starts from, and what its session left there.
ALTER TABLE tasks ADD COLUMN after TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tasks ADD COLUMN if_dependency_fails TEXT NOT NULL DEFAULT 'cancel';
ALTER TABLE tasks ADD COLUMN base TEXT;
ALTER TABLE tasks ADD COLUMN change TEXT;

-- name: migration_8
-- Each tenant's ledger numbered on its own: 1, 2, 3 … with no gap, from its row of
-- ledger_heads (the highest seq it has), so that a tenant's numbers say nothing of another's.
-- The board's rows are renumbered tenant by tenant in their order; (tenant, seq) is the key.
CREATE TABLE ledger_by_tenant (
    seq        INTEGER NOT NULL,
    at         TEXT NOT NULL,
    task       TEXT,                        -- NULL for a schedule's missed or skipped fire
    schedule   TEXT,
    tenant     TEXT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    agent      TEXT,
    epoch      INTEGER NOT NULL,
    reason     TEXT,
    cost       TEXT,                        -- JSON object
    uid        INTEGER,
    pid        INTEGER,
    PRIMARY KEY (tenant, seq)
) WITHOUT ROWID;
INSERT INTO ledger_by_tenant
SELECT row_number() OVER (PARTITION BY tenant ORDER BY seq), at, task, schedule, tenant,
       from_state, to_state, agent, epoch, reason, cost, uid, pid
  FROM ledger ORDER BY seq;
DROP TABLE ledger;
ALTER TABLE ledger_by_tenant RENAME TO ledger;
CREATE INDEX ledger_task ON ledger (task);
CREATE TABLE ledger_heads (
    tenant TEXT PRIMARY KEY,
    seq    INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO ledger_heads (tenant, seq) SELECT tenant, MAX(seq) FROM ledger GROUP BY tenant;

-- name: update_task
-- Positional values, in the order of colibri.store.rows.CHANGE_COLUMNS, then the id, the
-- expected state and the expected epoch (the compare-and-set).
UPDATE tasks
   SET state = ?, outcome = ?, agent = ?, output = ?, error = ?, cost = ?, attempts = ?,
       epoch = ?, not_before = ?, question = ?, change = ?, updated_at = ?
 WHERE id = ? AND state = ? AND epoch = ?;

-- name: get_task
SELECT * FROM tasks WHERE id = ?;

-- name: put_settled
-- A write of the store's own after a COMMIT whose sync failed (SqliteStore._settle): its frames
-- take the failed batch's place in the WAL.
INSERT INTO meta (name, value) VALUES ('settled_at', ?)
ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- name: fingerprint
SELECT fingerprint FROM tasks WHERE id = ?;

-- name: open_tasks
SELECT * FROM tasks WHERE state <> 'closed' ORDER BY id;

-- name: children
SELECT * FROM tasks WHERE parent = ? ORDER BY id;

-- name: open_family
-- A task and its descendants at any depth (an ended task's children may still be open), in one
-- query rather than one per member; only the pending and running ones, the root first.
WITH RECURSIVE family (id, depth) AS (
    SELECT id, 0 FROM tasks WHERE id = ?
    UNION ALL
    SELECT tasks.id, family.depth + 1 FROM tasks JOIN family ON tasks.parent = family.id
)
SELECT tasks.* FROM family JOIN tasks ON tasks.id = family.id
 WHERE tasks.state IN ('pending', 'running')
 ORDER BY family.depth, tasks.id;

-- name: ledger_of_task
-- Rows of a task (of the tenant given only, if one is), in each tenant's order.
SELECT * FROM ledger WHERE task = ? AND (? IS NULL OR tenant = ?) ORDER BY tenant, seq;

-- name: ledger_of_tenant
SELECT * FROM ledger WHERE tenant = ? AND seq > ? ORDER BY seq LIMIT ?;

-- name: ledger_heads
SELECT tenant, seq FROM ledger_heads ORDER BY tenant;

-- name: ledger_head
SELECT seq FROM ledger_heads WHERE tenant = ?;

-- name: ledger_set_head
INSERT INTO ledger_heads (tenant, seq) VALUES (?, ?)
ON CONFLICT (tenant) DO UPDATE SET seq = excluded.seq;

-- name: count_by_state
SELECT state, COUNT(*) FROM tasks GROUP BY state;

-- name: count_by_outcome
SELECT outcome, COUNT(*) FROM tasks WHERE outcome IS NOT NULL GROUP BY outcome;

-- name: upsert_agent
INSERT INTO agents (name, tenant, capabilities, slots, ttl, workspace, registered_at, last_seen)
VALUES (:name, :tenant, :capabilities, :slots, :ttl, :workspace, :registered_at, :last_seen)
ON CONFLICT (name) DO UPDATE
   SET tenant = excluded.tenant, capabilities = excluded.capabilities, slots = excluded.slots,
       ttl = excluded.ttl, workspace = excluded.workspace,
       registered_at = excluded.registered_at, last_seen = excluded.last_seen;

-- name: touch_agent
UPDATE agents SET last_seen = ? WHERE name = ?;

-- name: all_agents
SELECT * FROM agents ORDER BY name;

-- name: all_skills
SELECT s.name, s.description,
       (SELECT COUNT(*) FROM agents a, json_each(a.capabilities) c WHERE c.value = s.name) AS agents
  FROM skills s ORDER BY s.name;

-- name: upsert_schedule
INSERT INTO schedules (name, next_fire_at, doc) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET next_fire_at = excluded.next_fire_at, doc = excluded.doc;

-- name: all_schedules
SELECT doc FROM schedules ORDER BY name;

-- name: get_schedule
SELECT doc FROM schedules WHERE name = ?;

-- name: insert_fire
INSERT INTO schedule_fires (schedule, nominal, outcome, task, at, reason) VALUES (?, ?, ?, ?, ?, ?);

-- name: fires_of
SELECT schedule, nominal, outcome, task, at, reason FROM schedule_fires
 WHERE schedule = ? ORDER BY nominal DESC LIMIT ?;

-- name: cost_totals
-- {key} is one of the expressions in colibri.store.sql.COST_KEYS, never user text; {tenant} is
-- "AND l.tenant = ?" for one tenant's rows, or nothing.
-- TOTAL, not SUM: a float that never overflows (SUM of integers raises "integer overflow" past
-- 2**63, which would make this query, and the daily budgets read at start-up, fail for good).
SELECT {key} AS key, COUNT(*) AS sessions,
       TOTAL(json_extract(l.cost, '$.usd')) AS usd,
       TOTAL(json_extract(l.cost, '$.tokens_in')) AS tokens_in,
       TOTAL(json_extract(l.cost, '$.tokens_out')) AS tokens_out
  FROM ledger l LEFT JOIN tasks t ON t.id = l.task
 WHERE l.cost IS NOT NULL AND l.at >= ? {tenant}
 GROUP BY key ORDER BY key;

-- name: count_children
SELECT COUNT(*) FROM tasks WHERE parent = ?;

-- name: copy_counts
-- colibri store copy (store/copy.py) reads the whole board in one read transaction.
SELECT (SELECT COUNT(*) FROM tasks) AS tasks, (SELECT COUNT(*) FROM ledger) AS ledger,
       (SELECT COUNT(*) FROM schedule_fires) AS fires, (SELECT COUNT(*) FROM tokens) AS tokens;

-- name: copy_tasks
SELECT * FROM tasks ORDER BY id;

-- name: copy_ledger
-- Every tenant's rows, merged by time (they are numbered again, into one tenant).
SELECT * FROM ledger ORDER BY at, tenant, seq;

-- name: copy_fires
SELECT schedule, nominal, outcome, task, at, reason FROM schedule_fires ORDER BY schedule, nominal;

-- name: copy_skills
SELECT name, description FROM skills ORDER BY name;

-- name: copy_tenants
SELECT tenant FROM tasks UNION SELECT tenant FROM ledger ORDER BY 1;

-- name: backup_counts
SELECT (SELECT COUNT(*) FROM tasks) AS tasks, (SELECT COUNT(*) FROM ledger) AS ledger_rows;
