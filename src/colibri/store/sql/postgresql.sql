-- Named blocks: "-- name: NAME" starts a block; colibri.store.sql loads them by name.
-- Migrations are the blocks named migration_N, applied in order; colibri_schema.version = N
-- after. Placeholders are psycopg's (%s, %(name)s). Text that is compared or ordered (ids,
-- names, times) is COLLATE "C": byte order, as SQLite compares.

-- name: migration_1
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

-- name: migration_2
-- Who serves the board: one lease, its owner a daemon's process id of the moment (never a host
-- name), its epoch one more at every taking, its expiry on the server's clock. Every write
-- transaction of the owner holds the row FOR SHARE with its epoch (the fence), so a daemon
-- that lost the lease cannot write a single row.
CREATE TABLE leases (
    name       TEXT COLLATE "C" PRIMARY KEY,
    owner      TEXT COLLATE "C" NOT NULL,
    address    TEXT,
    epoch      BIGINT NOT NULL,
    taken_at   TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

-- name: migration_3
-- The daemons of a board, serving or standing by: each says it is there at every renewal or
-- poll of the lease (colibri hive list).
CREATE TABLE hives (
    id         TEXT COLLATE "C" PRIMARY KEY,
    address    TEXT,
    host       TEXT NOT NULL,
    pid        BIGINT NOT NULL,
    root       TEXT,
    ttl        DOUBLE PRECISION NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    last_beat  TIMESTAMPTZ NOT NULL
);

-- name: migration_4
-- The lease's holder (owner and epoch) as a key of the row: an update that changes them (a
-- takeover) is a key update, which waits for the FOR KEY SHARE the fence holds, while a renewal
-- (expires_at only) is not, and never queues behind the serving daemon's own batches.
CREATE UNIQUE INDEX leases_holder ON leases (name, owner, epoch);

-- name: migration_5
-- Row-level security: every row is seen and written only by a transaction that named its
-- tenant — set_config('colibri.tenants', 'a,b', true), or '*' for every tenant, at the start of
-- each transaction, never for a connection. FORCE: the tables' owner is held to it too (only a
-- superuser, or a role with BYPASSRLS, is not; `colibri hive grant` makes a role that is).
-- Schedules and their fire records carry their tenant as a column now.
ALTER TABLE schedules ADD COLUMN tenant TEXT COLLATE "C";
UPDATE schedules SET tenant = COALESCE(doc::jsonb -> 'task' ->> 'tenant', 'default');
ALTER TABLE schedules ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE schedule_fires ADD COLUMN tenant TEXT COLLATE "C";
UPDATE schedule_fires f SET tenant = COALESCE(
    (SELECT s.tenant FROM schedules s WHERE s.name = f.schedule), 'default');
ALTER TABLE schedule_fires ALTER COLUMN tenant SET NOT NULL;
-- Whether the transaction named tenant t (inlined by the planner: one expression per row).
CREATE FUNCTION colibri_sees(t TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT current_setting('colibri.tenants', true) = '*'
        OR t = ANY (string_to_array(current_setting('colibri.tenants', true), ','))
$$;
-- Whether it named any: the rows of the whole board (the claim key, the skills) need that much.
CREATE FUNCTION colibri_named() RETURNS BOOLEAN LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(current_setting('colibri.tenants', true), '') <> ''
$$;
-- The ledger's highest seq over every tenant's rows: a batch numbers its rows after it, whatever
-- tenants its transaction names (the seq is the whole board's, gap-free). It names every tenant
-- for its one read and names the caller's again after it (a SET clause on the function would do
-- the same, but only a superuser may attach a setting of this name to a function).
CREATE FUNCTION colibri_ledger_top() RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    named TEXT := COALESCE(current_setting('colibri.tenants', true), '');
    top BIGINT;
BEGIN
    PERFORM set_config('colibri.tenants', '*', true);
    SELECT COALESCE(MAX(seq), 0) INTO top FROM ledger;
    PERFORM set_config('colibri.tenants', named, true);
    RETURN top;
END
$$;
ALTER TABLE tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE tasks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tasks USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE ledger FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON ledger USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON agents USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tokens USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedules FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON schedules
    USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE schedule_fires ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedule_fires FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON schedule_fires
    USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tenants USING (colibri_sees(name)) WITH CHECK (colibri_sees(name));
ALTER TABLE meta ENABLE ROW LEVEL SECURITY;
ALTER TABLE meta FORCE ROW LEVEL SECURITY;
CREATE POLICY board_rows ON meta USING (colibri_named()) WITH CHECK (colibri_named());
ALTER TABLE skills ENABLE ROW LEVEL SECURITY;
ALTER TABLE skills FORCE ROW LEVEL SECURITY;
CREATE POLICY board_rows ON skills USING (colibri_named()) WITH CHECK (colibri_named());
-- Who serves, which daemons there are, the schema's version: no tenant's data, and read before
-- any tenant is known (taking the lease, `colibri hive list`, opening the board).
ALTER TABLE leases ENABLE ROW LEVEL SECURITY;
ALTER TABLE leases FORCE ROW LEVEL SECURITY;
CREATE POLICY any_rows ON leases USING (true) WITH CHECK (true);
ALTER TABLE hives ENABLE ROW LEVEL SECURITY;
ALTER TABLE hives FORCE ROW LEVEL SECURITY;
CREATE POLICY any_rows ON hives USING (true) WITH CHECK (true);
ALTER TABLE colibri_schema ENABLE ROW LEVEL SECURITY;
ALTER TABLE colibri_schema FORCE ROW LEVEL SECURITY;
CREATE POLICY any_rows ON colibri_schema USING (true) WITH CHECK (true);

-- name: migration_6
-- Daemons that share the board's tenants out among themselves (run --share), and a tenant's
-- lease marked to be handed to one daemon (hive move): its owner gives it back at its next
-- renewal, and only that daemon takes it while it lives.
ALTER TABLE hives ADD COLUMN sharing BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE leases ADD COLUMN handover_to TEXT COLLATE "C";
-- How many agents each daemon had connected at its last beat (hive list).
ALTER TABLE hives ADD COLUMN agents INTEGER NOT NULL DEFAULT 0;
-- The tenants a daemon started with --tenants serves or stands by for: not shared out.
ALTER TABLE hives ADD COLUMN tenants TEXT[];

-- name: migration_7
-- Migrations 5 and 6 were changed after builds had made boards with them (which a released
-- migration never is again): a board of version 6 may lack hives.agents and hives.tenants
-- (made by the builds that first had 6), and one of version 5 or 6 may have the first
-- colibri_ledger_top, a SQL function with SET colibri.tenants (which only a superuser could
-- make). Every released shape of version 6 converges here on the last one.
ALTER TABLE hives ADD COLUMN IF NOT EXISTS agents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE hives ADD COLUMN IF NOT EXISTS tenants TEXT[];
CREATE OR REPLACE FUNCTION colibri_ledger_top() RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    named TEXT := COALESCE(current_setting('colibri.tenants', true), '');
    top BIGINT;
BEGIN
    PERFORM set_config('colibri.tenants', '*', true);
    SELECT COALESCE(MAX(seq), 0) INTO top FROM ledger;
    PERFORM set_config('colibri.tenants', named, true);
    RETURN top;
END
$$;

-- name: migration_8
-- A tenant's reads cost by its own rows: its ledger in seq order (ledger --follow, a token's
-- ledger and cost), its tasks in id order (a token's list, its id prefixes).
CREATE INDEX IF NOT EXISTS ledger_tenant ON ledger (tenant, seq);
CREATE INDEX IF NOT EXISTS tasks_tenant ON tasks (tenant, id);

-- name: migration_9
-- Ids by their end, as the CLI and the TUI show them (their last 8 characters): the ids that
-- end with the same 4 characters as a suffix given, then of its tenant (a token's).
CREATE INDEX IF NOT EXISTS tasks_tail ON tasks (substr(id, length(id) - 3), tenant);

-- name: migration_10
-- Tasks that wait for others (their ids, a JSON array, and what becomes of them when one
-- fails), the branch or commit a task's worktree starts from, and what its session left there.
ALTER TABLE tasks ADD COLUMN after TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tasks ADD COLUMN if_dependency_fails TEXT NOT NULL DEFAULT 'cancel';
ALTER TABLE tasks ADD COLUMN base TEXT;
ALTER TABLE tasks ADD COLUMN change TEXT;

-- name: migration_11
-- Each tenant's ledger numbered on its own: 1, 2, 3 … with no gap, from its row of
-- ledger_heads (the highest seq it has), which a batch bumps by the rows it writes and holds
-- locked until it ends. Daemons serving different tenants never wait for each other's batches
-- (the board's one writers' lock, and colibri_ledger_top, are gone), and a tenant's numbers
-- say nothing of another's. The board's rows are renumbered tenant by tenant in their order.
ALTER TABLE ledger DROP CONSTRAINT ledger_pkey;
UPDATE ledger l SET seq = n.seq
  FROM (SELECT seq AS old, row_number() OVER (PARTITION BY tenant ORDER BY seq) AS seq
          FROM ledger) n
 WHERE l.seq = n.old;
ALTER TABLE ledger ADD PRIMARY KEY (tenant, seq);
DROP INDEX IF EXISTS ledger_tenant;
DROP FUNCTION IF EXISTS colibri_ledger_top();
CREATE TABLE ledger_heads (
    tenant TEXT COLLATE "C" PRIMARY KEY,
    seq    BIGINT NOT NULL
);
INSERT INTO ledger_heads (tenant, seq) SELECT tenant, MAX(seq) FROM ledger GROUP BY tenant;
ALTER TABLE ledger_heads ENABLE ROW LEVEL SECURITY;
ALTER TABLE ledger_heads FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON ledger_heads
    USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));

-- name: migration_12
-- The open tasks' ids in a table of their own, kept by the tasks' own statements (a trigger on
-- each statement, not each row), so that no index of tasks holds a column a transition changes
-- (tasks_open held state, tasks_agent the agent): a transition's update is then heap-only
-- (HOT), in the page the task is in (left a quarter free for it), where it wrote a new entry
-- into every index of tasks. A closed task never opens again, so only an insert adds an id.
CREATE TABLE open_tasks (
    id     TEXT COLLATE "C" PRIMARY KEY,
    tenant TEXT COLLATE "C" NOT NULL
);
INSERT INTO open_tasks (id, tenant) SELECT id, tenant FROM tasks WHERE state <> 'closed';
DROP INDEX IF EXISTS tasks_open;
DROP INDEX IF EXISTS tasks_agent;
ALTER TABLE tasks SET (fillfactor = 50);
-- (= ANY of an array, not a join: the ids are looked up in the primary key, however many the
-- planner guesses a transition table holds.)
CREATE FUNCTION colibri_tasks_opened() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO open_tasks (id, tenant) SELECT id, tenant FROM added WHERE state <> 'closed';
    RETURN NULL;
END
$$;
CREATE FUNCTION colibri_tasks_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM open_tasks WHERE id = ANY (ARRAY(SELECT id FROM changed WHERE state = 'closed'));
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_opened AFTER INSERT ON tasks REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION colibri_tasks_opened();
CREATE TRIGGER tasks_closed AFTER UPDATE ON tasks REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION colibri_tasks_closed();
ALTER TABLE open_tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE open_tasks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON open_tasks
    USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));

-- name: migration_13
-- Migration 12's triggers named open_tasks as the session's search_path finds it: a statement
-- on this board's tasks from a session whose path leads elsewhere (an operator naming the
-- board's schema in the statement, another board's schema first in the path) would have kept
-- another schema's table, or failed. They name the table beside the one that fired them.
CREATE OR REPLACE FUNCTION colibri_tasks_opened() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I.open_tasks (id, tenant) '
                   'SELECT id, tenant FROM added WHERE state <> ''closed''', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION colibri_tasks_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.open_tasks '
                   'WHERE id = ANY (ARRAY(SELECT id FROM changed WHERE state = ''closed''))',
                   TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

-- name: migration_14
-- The open tasks' ids kept whatever is done to tasks. Migration 12 read them before it held
-- any lock on tasks, so a batch of an older daemon still open while its lease ran out could
-- commit a new task, or a close, between that read and the migration's commit: they are read
-- again under a lock that keeps writers out. A task deleted takes its id along. An update
-- that would move a task to another tenant, change its id, or open a closed task again —
-- none of which Colibri does — is refused, since the ids could not follow it (the WHEN is
-- checked for each row without calling the function, which only refuses).
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM open_tasks;
INSERT INTO open_tasks (id, tenant) SELECT id, tenant FROM tasks WHERE state <> 'closed';
CREATE FUNCTION colibri_task_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'task %: a task keeps its id and its tenant, and a closed task stays closed',
        OLD.id USING ERRCODE = 'check_violation';
END
$$;
CREATE TRIGGER tasks_kept BEFORE UPDATE ON tasks FOR EACH ROW
    WHEN (NEW.id <> OLD.id OR NEW.tenant <> OLD.tenant
          OR (OLD.state = 'closed' AND NEW.state <> 'closed'))
    EXECUTE FUNCTION colibri_task_kept();
CREATE FUNCTION colibri_tasks_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.open_tasks WHERE id = ANY (ARRAY(SELECT id FROM removed))',
                   TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_removed AFTER DELETE ON tasks REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION colibri_tasks_removed();

-- name: migration_15
-- A TRUNCATE of tasks fires no delete trigger: the open ids it left behind would be read as
-- open tasks that are not there, and refuse a new task of the same id. It empties them too.
-- (Only the tables' owner may truncate: the role `hive grant` makes has no TRUNCATE.)
CREATE FUNCTION colibri_tasks_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('TRUNCATE %I.open_tasks', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_truncated AFTER TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION colibri_tasks_truncated();

-- name: board_columns
-- The columns of the board's tables, as a board of this version must have them (``_COLUMNS``).
SELECT c.relname AS table_name, a.attname AS column_name
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped;

-- name: hive_beat
INSERT INTO hives (id, address, host, pid, root, ttl, started_at, last_beat, sharing, agents,
                   tenants)
VALUES (%(id)s, %(address)s, %(host)s, %(pid)s, %(root)s, %(ttl)s, now(), now(), %(sharing)s,
        %(agents)s, %(tenants)s)
ON CONFLICT (id) DO UPDATE SET address = excluded.address, last_beat = now(),
                               agents = excluded.agents;

-- name: hive_forget_old
DELETE FROM hives WHERE last_beat < now() - interval '1 day';

-- name: hive_leave
DELETE FROM hives WHERE id = %(id)s;

-- name: hive_list
-- Each daemon with the leases it holds live: 'board' (the whole board) or 'tenant/<name>'.
SELECT h.id, h.address, h.host, h.pid, h.root, h.ttl,
       to_char(h.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS started_at,
       EXTRACT(EPOCH FROM now() - h.last_beat)::float8 AS beat_ago_s, h.sharing, h.agents,
       MAX(l.epoch) AS lease_epoch,
       EXTRACT(EPOCH FROM MIN(l.expires_at) - now())::float8 AS lease_left_s,
       COALESCE(array_agg(l.name ORDER BY l.name) FILTER (WHERE l.name IS NOT NULL), '{}')
           AS leases
  FROM hives h LEFT JOIN leases l ON l.owner = h.id AND l.expires_at > now()
 GROUP BY h.id
 ORDER BY h.started_at, h.id;

-- name: lease_clash
-- A live lease that taking the leases %(names)s would overlap: one of them, the whole board's
-- (which covers every tenant), or — when the whole board's is taken — any tenant's.
SELECT name, owner, address, epoch, EXTRACT(EPOCH FROM expires_at - now())::float8 AS left_s
  FROM leases
 WHERE expires_at > now()
   AND (name = ANY(%(names)s) OR name = 'board'
        OR ('board' = ANY(%(names)s) AND name LIKE 'tenant/%%'))
 ORDER BY expires_at DESC
 LIMIT 1;

-- name: lease_overlaps
-- The expired rows a taking of %(names)s overlaps besides its own: the whole board's (taking a
-- tenant), or every tenant's (taking the whole board). FOR UPDATE waits for a batch that still
-- holds one FOR KEY SHARE, as a takeover of a row waits for its batches. (A live one makes the
-- taking refuse: now() is the transaction's, the same in both statements.)
SELECT name FROM leases
 WHERE expires_at <= now()
   AND (name = 'board' OR ('board' = ANY(%(names)s) AND starts_with(name, 'tenant/')))
 ORDER BY name
   FOR UPDATE;

-- name: lease_next_epoch
-- One more than any of the rows taken ever had: every row's epoch grows at every taking.
SELECT COALESCE(MAX(epoch), 0) + 1 AS epoch FROM leases WHERE name = ANY(%(names)s);

-- name: lease_take
-- The ttl runs from this statement (clock_timestamp), not from the transaction's start: a
-- taking far from its daemon spends round trips before it, which would be taken off the
-- lease. (The daemon counts its own deadline from before the taking: it comes first.)
INSERT INTO leases (name, owner, address, epoch, taken_at, expires_at)
SELECT name, %(owner)s, %(address)s, %(epoch)s, now(),
       clock_timestamp() + %(ttl)s * interval '1 second'
  FROM unnest(%(names)s::text[]) AS name
ON CONFLICT (name) DO UPDATE
   SET owner = excluded.owner, address = excluded.address, epoch = excluded.epoch,
       taken_at = excluded.taken_at, expires_at = excluded.expires_at, handover_to = NULL
 WHERE leases.expires_at <= now()
-- (The server's clock as it answers: the board's, which its schedules follow.)
RETURNING name, EXTRACT(EPOCH FROM clock_timestamp())::float8 AS board_time;

-- name: live_leases
-- Every live lease (where to send a request for a tenant not served here), and the tenants'
-- leases marked to be handed over, live or not: what a sharing daemon plans by.
SELECT name, owner, address, handover_to, expires_at > now() AS live
  FROM leases WHERE expires_at > now() OR handover_to IS NOT NULL;

-- name: sharing_daemons
-- The daemons that said they were there within their ttl: those sharing tenants out, and the
-- tenants the others serve or stand by for (not shared out).
SELECT id, sharing, tenants FROM hives WHERE last_beat > now() - ttl * interval '1 second';

-- name: known_tenants
SELECT name FROM tenants;

-- name: lease_renew
-- Each row with its own epoch (a row taken later than the others has another).
-- Only while it is live: a row that expired may overlap a lease taken since (a tenant's, of the
-- whole board's), and a daemon renewing it would serve beside that lease's daemon.
UPDATE leases SET expires_at = now() + %(ttl)s * interval '1 second'
 WHERE owner = %(owner)s AND expires_at > now()
   AND (name, epoch) IN (SELECT * FROM unnest(%(names)s::text[], %(epochs)s::bigint[]))
RETURNING name, EXTRACT(EPOCH FROM clock_timestamp())::float8 AS board_time;

-- name: lease_release
UPDATE leases SET expires_at = now() - interval '1 millisecond'
 WHERE owner = %(owner)s
   AND (name, epoch) IN (SELECT * FROM unnest(%(names)s::text[], %(epochs)s::bigint[]));

-- name: lease_fence
-- FOR KEY SHARE: a takeover (it changes owner and epoch, keys of leases_holder) waits for the
-- batch to end; a renewal (expires_at) does not, so it cannot be starved by back-to-back batches.
-- Every row of the daemon's leases must be found, each with its epoch.
SELECT name FROM leases
 WHERE owner = %s AND (name, epoch) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))
   AND expires_at > now()
   FOR KEY SHARE;

-- name: live_daemons_like
SELECT id, sharing FROM hives
 WHERE id LIKE %s AND last_beat > now() - ttl * interval '1 second';

-- name: lease_of_tenant
SELECT l.owner, l.epoch, COALESCE(h.sharing, false) AS sharing
  FROM leases l LEFT JOIN hives h ON h.id = l.owner
 WHERE l.name = 'tenant/' || %s AND l.expires_at > now();

-- name: lease_hand_over
-- hive move: the owner gives the tenant back at its next renewal; only %(to)s takes it then.
UPDATE leases SET handover_to = %(to)s
 WHERE name = %(name)s AND expires_at > now()
RETURNING owner, epoch;

-- name: update_task
UPDATE tasks
   SET state = %(state)s, outcome = %(outcome)s, agent = %(agent)s, output = %(output)s,
       error = %(error)s, cost = %(cost)s, attempts = %(attempts)s, epoch = %(epoch)s,
       not_before = %(not_before)s, question = %(question)s, change = %(change)s,
       updated_at = %(updated_at)s
 WHERE id = %(id)s AND state = %(expected_state)s AND epoch = %(expected_epoch)s;

-- name: get_task
SELECT * FROM tasks WHERE id = %s AND colibri_sees(tenant);

-- name: fingerprint
SELECT fingerprint FROM tasks WHERE id = %s AND colibri_sees(tenant);

-- name: open_tasks
SELECT t.* FROM open_tasks o JOIN tasks t ON t.id = o.id
 WHERE colibri_sees(o.tenant) AND colibri_sees(t.tenant) ORDER BY t.id;

-- name: children
SELECT * FROM tasks WHERE parent = %s AND colibri_sees(tenant) ORDER BY id;

-- name: open_family
WITH RECURSIVE family (id, depth) AS (
    SELECT id, 0 FROM tasks WHERE id = %s
    UNION ALL
    SELECT tasks.id, family.depth + 1 FROM tasks JOIN family ON tasks.parent = family.id
)
SELECT tasks.* FROM family JOIN tasks ON tasks.id = family.id
 WHERE tasks.state IN ('pending', 'running') AND colibri_sees(tasks.tenant)
 ORDER BY family.depth, tasks.id;

-- name: ledger_of_tenant
SELECT * FROM ledger WHERE tenant = %s AND seq > %s AND colibri_sees(tenant) ORDER BY seq LIMIT %s;

-- name: ledger_of_tenants
-- Up to the limit's rows of each tenant past its seq in the cursor (given as two arrays; a
-- tenant not in it from its first row), each tenant's by its own index: the store merges them.
SELECT l.* FROM ledger_heads h
  LEFT JOIN unnest(%(tenants)s::text[], %(seqs)s::bigint[]) AS c(tenant, seq)
    ON c.tenant = h.tenant
 CROSS JOIN LATERAL (
       SELECT * FROM ledger l WHERE l.tenant = h.tenant AND l.seq > COALESCE(c.seq, 0)
        ORDER BY l.seq LIMIT %(limit)s) l
 WHERE h.seq > COALESCE(c.seq, 0) AND colibri_sees(h.tenant) AND colibri_sees(l.tenant);

-- name: ledger_of_task
-- Rows of a task (of the tenant given only, if one is), in each tenant's order.
SELECT * FROM ledger WHERE task = %s AND (%s::text IS NULL OR tenant = %s)
   AND colibri_sees(tenant) ORDER BY tenant, seq;

-- name: ledger_heads
SELECT tenant, seq FROM ledger_heads WHERE colibri_sees(tenant) ORDER BY tenant;

-- name: ledger_take
-- Number n rows of a tenant: its head moved past them (locked until the batch ends, so
-- that nobody else numbers its rows meanwhile), the new head returned.
INSERT INTO ledger_heads AS h (tenant, seq) VALUES (%(tenant)s, %(n)s)
ON CONFLICT (tenant) DO UPDATE SET seq = h.seq + excluded.seq
RETURNING seq;

-- name: count_by_state
SELECT state, COUNT(*) AS n FROM tasks WHERE colibri_sees(tenant) GROUP BY state;

-- name: count_by_outcome
SELECT outcome, COUNT(*) AS n FROM tasks
 WHERE outcome IS NOT NULL AND colibri_sees(tenant) GROUP BY outcome;

-- name: upsert_agent
INSERT INTO agents (name, tenant, capabilities, slots, ttl, workspace, registered_at, last_seen)
VALUES (%(name)s, %(tenant)s, %(capabilities)s, %(slots)s, %(ttl)s, %(workspace)s,
        %(registered_at)s, %(last_seen)s)
ON CONFLICT (name) DO UPDATE
   SET tenant = excluded.tenant, capabilities = excluded.capabilities, slots = excluded.slots,
       ttl = excluded.ttl, workspace = excluded.workspace,
       registered_at = excluded.registered_at, last_seen = excluded.last_seen
 -- (Names are the whole board's: one of a tenant not named here is not this daemon's to take.)
 WHERE colibri_sees(agents.tenant)
RETURNING name;

-- name: all_agents
SELECT * FROM agents WHERE colibri_sees(tenant) ORDER BY name;

-- name: all_skills
SELECT s.name, s.description,
       (SELECT COUNT(*) FROM agents a WHERE a.capabilities::jsonb ? s.name) AS agents
  FROM skills s ORDER BY s.name;

-- name: upsert_schedule
INSERT INTO schedules (name, tenant, next_fire_at, doc) VALUES (%s, %s, %s, %s)
ON CONFLICT (name) DO UPDATE
   SET tenant = excluded.tenant, next_fire_at = excluded.next_fire_at, doc = excluded.doc
 WHERE colibri_sees(schedules.tenant)
RETURNING name;

-- name: all_schedules
SELECT doc FROM schedules WHERE colibri_sees(tenant) ORDER BY name;

-- name: get_schedule
SELECT doc FROM schedules WHERE name = %s AND colibri_sees(tenant);

-- name: insert_fire
-- The fire is its schedule's tenant's (a schedule deleted since: the default tenant's).
INSERT INTO schedule_fires (schedule, nominal, outcome, task, at, reason, tenant)
VALUES (%(schedule)s, %(nominal)s, %(outcome)s, %(task)s, %(at)s, %(reason)s,
        COALESCE((SELECT tenant FROM schedules WHERE name = %(schedule)s), 'default'));

-- name: fires_of
SELECT schedule, nominal, outcome, task, at, reason FROM schedule_fires
 WHERE schedule = %s AND colibri_sees(tenant) ORDER BY nominal DESC LIMIT %s;

-- name: cost_totals
-- {key} is one of the expressions in colibri.store.sql.COST_KEYS, never user text. Sums are taken
-- as double precision, so they never overflow, as SQLite's TOTAL.
SELECT {key} AS key, COUNT(*) AS sessions,
       COALESCE(SUM((l.cost::jsonb ->> 'usd')::double precision), 0) AS usd,
       COALESCE(SUM((l.cost::jsonb ->> 'tokens_in')::double precision), 0) AS tokens_in,
       COALESCE(SUM((l.cost::jsonb ->> 'tokens_out')::double precision), 0) AS tokens_out
  FROM ledger l LEFT JOIN tasks t ON t.id = l.task
 WHERE l.cost IS NOT NULL AND l.at >= %s AND (%s::text IS NULL OR l.tenant = %s)
   AND colibri_sees(l.tenant)
 GROUP BY 1 ORDER BY 1 NULLS FIRST;

-- name: count_children
SELECT COUNT(*) AS n FROM tasks WHERE parent = %s AND colibri_sees(tenant);

-- name: copy_lock_leases
-- colibri store copy (store/copy.py): no daemon may take the lease (insert or update its row)
-- until the copy commits or rolls back. The fence's FOR SHARE is not blocked: a daemon whose
-- lease is live makes the copy refuse at once, before anything is written.
LOCK TABLE leases IN SHARE ROW EXCLUSIVE MODE;

-- name: live_lease
-- A lease a daemon holds now (migrations refuse then; store copy, one over its tenant): the
-- whole board's first, then the one that lasts longest.
SELECT name, owner, address, epoch, EXTRACT(EPOCH FROM expires_at - now())::float8 AS left_s
  FROM leases
 WHERE expires_at > now() AND (%(tenant)s::text IS NULL OR name IN ('board', 'tenant/' || %(tenant)s))
 ORDER BY name = 'board' DESC, expires_at DESC
 LIMIT 1;

-- name: hives_made
SELECT to_regclass('hives') IS NOT NULL AS made;

-- name: hive_of
SELECT host, pid FROM hives WHERE id = %s;

-- name: copy_task_clash
SELECT id FROM tasks WHERE id = ANY(%s) ORDER BY id LIMIT 1;

-- name: copy_key_clash
SELECT id, idempotency_key FROM tasks WHERE tenant = %s AND idempotency_key = ANY(%s)
 ORDER BY idempotency_key LIMIT 1;

-- name: copy_insert_fire
-- A fire the target recorded already (a schedule of that name it had) stays as it is: either
-- record says the nominal time was handled, which is all a record is for.
INSERT INTO schedule_fires (schedule, nominal, outcome, task, at, reason, tenant)
VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (schedule, nominal) DO NOTHING;

-- name: copy_agent_clash
SELECT name, tenant FROM agents WHERE name = ANY(%s) AND tenant <> %s ORDER BY name LIMIT 1;

-- name: copy_insert_agent
-- An agent the target already has in the tenant keeps its registration there.
INSERT INTO agents (name, tenant, capabilities, slots, ttl, workspace, registered_at, last_seen)
VALUES (%(name)s, %(tenant)s, %(capabilities)s, %(slots)s, %(ttl)s, %(workspace)s,
        %(registered_at)s, %(last_seen)s)
ON CONFLICT (name) DO NOTHING;

-- name: copy_merge_skill
-- A skill the target knows keeps its description, unless it has none.
INSERT INTO skills (name, description) VALUES (%s, %s)
ON CONFLICT (name) DO UPDATE SET description = excluded.description
 WHERE skills.description = '' AND excluded.description <> '';

-- name: copy_schedule_clash
SELECT name FROM schedules WHERE name = ANY(%s) ORDER BY name LIMIT 1;

-- name: copy_count_skills
SELECT COUNT(*) AS n FROM skills;

-- name: copy_board_made
SELECT to_regclass('colibri_schema') IS NOT NULL AS made;

-- name: copy_board_version
SELECT version FROM colibri_schema;

-- name: grant_role_found
-- colibri hive grant: the role (if it exists), who runs the command, and what would let the role
-- past row-level security: being (or being able to become, as a member) a superuser, a role with
-- BYPASSRLS, the owner of a table of the board or of its schema; or CREATEROLE, with which it can
-- make itself such a member.
SELECT current_user AS me, current_schema() AS schema,
       r.rolname IS NOT NULL AS exists, COALESCE(r.rolsuper, false) AS superuser,
       COALESCE(r.rolbypassrls, false) AS bypassrls,
       COALESCE(r.rolcreaterole, false) AS createrole,
       (SELECT s.rolname FROM pg_roles s
         WHERE (s.rolsuper OR s.rolbypassrls OR s.rolcreaterole) AND s.oid <> r.oid
           AND pg_has_role(r.oid, s.oid, 'MEMBER')
         ORDER BY s.rolname LIMIT 1) AS member_of_unbound,
       (SELECT c.relname FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relkind = 'r'
           AND pg_has_role(r.oid, c.relowner, 'MEMBER')
         ORDER BY c.relname LIMIT 1) AS owns,
       (SELECT pg_has_role(r.oid, n.nspowner, 'MEMBER') FROM pg_namespace n
         WHERE n.nspname = current_schema()) AS owns_schema
  FROM (SELECT %s::name AS wanted) w LEFT JOIN pg_roles r ON r.rolname = w.wanted;

-- name: grant_role_beyond_rows
-- A right on a board's table that row-level security does not govern, which the role holds
-- (through a group, or PUBLIC) once what was granted to it by name has been taken back.
SELECT c.relname AS name, p.what
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  CROSS JOIN (VALUES ('TRUNCATE'), ('TRIGGER'), ('REFERENCES')) AS p (what)
 WHERE n.nspname = current_schema() AND c.relkind = 'r'
   AND has_table_privilege(%s::name, c.oid, p.what)
 ORDER BY c.relname, p.what LIMIT 1;

-- name: board_tables_rls
-- The board's tables, and whether row-level security is forced on each (owner included).
SELECT c.relname AS name, c.relrowsecurity AND c.relforcerowsecurity AS forced
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind = 'r'
 ORDER BY c.relname;
