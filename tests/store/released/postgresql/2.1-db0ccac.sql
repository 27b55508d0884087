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
