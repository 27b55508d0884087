-- Named blocks both dialects share, written with ? placeholders (a PostgreSQL store reads each
-- ? as %s): colibri.store.sql loads them beside the dialect's own, which never name one again.

-- name: find_idempotent
SELECT * FROM tasks WHERE tenant = ? AND idempotency_key = ?;

-- name: get_meta
SELECT value FROM meta WHERE name = ?;

-- name: put_meta
INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING;

-- name: ensure_tenant
INSERT INTO tenants (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING;

-- name: ensure_skill
INSERT INTO skills (name) VALUES (?) ON CONFLICT (name) DO NOTHING;

-- name: describe_skill
INSERT INTO skills (name, description) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET description = excluded.description;

-- name: delete_schedule
DELETE FROM schedules WHERE name = ?;

-- name: fire_recorded
SELECT 1 FROM schedule_fires WHERE schedule = ? AND nominal = ?;

-- name: set_question
UPDATE tasks SET question = ? WHERE id = ?;

-- name: set_after
UPDATE tasks SET after = ? WHERE id = ?;

-- name: insert_token
INSERT INTO tokens (id, tenant, role, agent, capabilities, workspace, secret_hash, created_at,
                    expires_at, revoked_at, last_used_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_token
SELECT * FROM tokens WHERE id = ?;

-- name: all_tokens
SELECT * FROM tokens ORDER BY created_at, id;

-- name: revoke_token
UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL;

-- name: touch_token
UPDATE tokens SET last_used_at = ? WHERE id = ?;
