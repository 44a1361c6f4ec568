-- Remote workers (docs/TASKS.md, "Workers"): each enrolled worker, bound to the one
-- certificate studiod's authority issued it, and the one-time join tokens that enrol
-- them (kept as digests only). A lease's expiry is found by an index walk of the
-- remote attempts that run.

CREATE TABLE workers (
    id                TEXT PRIMARY KEY NOT NULL,
    name              TEXT NOT NULL,
    -- The labels its join token granted, sorted and joined by ',': the most it may offer.
    labels            TEXT NOT NULL DEFAULT '',
    -- What it offered at its last `Register`.
    offered           TEXT,
    capacity          INTEGER NOT NULL DEFAULT 1 CHECK (capacity BETWEEN 1 AND 1024),
    version           TEXT,
    cert_sha256       TEXT NOT NULL UNIQUE,
    cert_serial       TEXT NOT NULL,
    cert_not_after_ms INTEGER NOT NULL,
    enrolled_at_ms    INTEGER NOT NULL,
    last_seen_at_ms   INTEGER,
    revoked_at_ms     INTEGER
);

CREATE TABLE worker_join_tokens (
    digest        TEXT PRIMARY KEY NOT NULL,
    labels        TEXT NOT NULL DEFAULT '',
    created_by    TEXT,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    used_at_ms    INTEGER,
    worker_id     TEXT
);

-- The lease reaper's walk: the earliest lease of a running remote attempt.
CREATE INDEX runs_leases ON runs (lease_expires_at_ms)
    WHERE status = 'running' AND worker_id <> 'builtin';
