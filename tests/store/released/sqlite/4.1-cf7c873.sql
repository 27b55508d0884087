-- Tokens of agents and operators on other machines: the SHA-256 of each secret, never the
-- secret itself.
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    role         TEXT NOT NULL,
    agent        TEXT,
    capabilities TEXT NOT NULL,             -- JSON array
    secret_hash  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT
) WITHOUT ROWID;
