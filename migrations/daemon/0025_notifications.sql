-- Notifications (docs/OPERATIONS.md, "Notifications"): named endpoints with their signing
-- secret sealed like a secret's value (never in clear here), the outbox written in the
-- transaction of the status change that causes each row, every delivery attempt, and
-- what the threshold and cooldown rules need: the failures in a row of each schedule or
-- task, and when each rule last sent.

CREATE TABLE notify_endpoints (
    name          TEXT PRIMARY KEY NOT NULL,
    url           TEXT NOT NULL,
    format        TEXT NOT NULL CHECK (format IN ('json', 'slack')),
    nonce         BLOB NOT NULL CHECK (length(nonce) = 12),
    ciphertext    BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    created_by    TEXT
);

CREATE TABLE notify_outbox (
    id                 TEXT PRIMARY KEY NOT NULL,
    endpoint           TEXT NOT NULL,
    event              TEXT NOT NULL,
    run_id             TEXT,
    schedule_id        TEXT,
    task_id            TEXT,
    -- The event as JSON; each attempt sends it in the endpoint's format.
    payload            TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms INTEGER,
    last_status        INTEGER,
    last_error         TEXT,
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    delivered_at_ms    INTEGER
);
-- The sender's walk: the earliest pending delivery.
CREATE INDEX notify_due ON notify_outbox (next_attempt_at_ms) WHERE status = 'pending';
CREATE INDEX notify_by_run ON notify_outbox (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notify_by_time ON notify_outbox (created_at_ms, id);

CREATE TABLE notify_attempts (
    delivery_id  TEXT NOT NULL,
    n            INTEGER NOT NULL,
    at_ms        INTEGER NOT NULL,
    took_ms      INTEGER NOT NULL,
    -- The receiver's HTTP status, or NULL when none answered.
    status       INTEGER,
    -- Why it failed, or the start of the receiver's answer.
    detail       TEXT,
    PRIMARY KEY (delivery_id, n)
);

CREATE TABLE notify_streaks (
    owner         TEXT PRIMARY KEY NOT NULL,
    failures      INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE notify_sent (
    owner           TEXT NOT NULL,
    rule            INTEGER NOT NULL,
    last_sent_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner, rule)
);
