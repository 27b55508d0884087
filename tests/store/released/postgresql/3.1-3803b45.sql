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
