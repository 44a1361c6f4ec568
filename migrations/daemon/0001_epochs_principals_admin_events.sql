-- studiod's first schema: epochs, paired principals and the admin audit trail.
-- Times are integer milliseconds since the Unix epoch (UTC); ids are UUIDv7 text.
-- Secrets appear only as SHA-256 digests.

CREATE TABLE epochs (
    epoch          TEXT PRIMARY KEY NOT NULL,
    pid            INTEGER NOT NULL,
    started_at_ms  INTEGER NOT NULL,
    stopped_at_ms  INTEGER
);

CREATE TABLE principals (
    id                      TEXT PRIMARY KEY NOT NULL,
    epoch                   TEXT NOT NULL REFERENCES epochs (epoch),
    kind                    TEXT NOT NULL,
    origin                  TEXT NOT NULL,
    token_digest            BLOB NOT NULL UNIQUE,
    decision_digest         BLOB NOT NULL UNIQUE,
    decision_expires_at_ms  INTEGER NOT NULL,
    created_at_ms           INTEGER NOT NULL,
    last_seen_at_ms         INTEGER NOT NULL,
    revoked_at_ms           INTEGER,
    revoked_reason          TEXT
);

CREATE INDEX principals_by_epoch ON principals (epoch, created_at_ms);

CREATE TABLE admin_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms         INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    epoch         TEXT NOT NULL,
    principal_id  TEXT,
    detail        TEXT NOT NULL DEFAULT '{}'
);

CREATE INDEX admin_events_by_epoch ON admin_events (epoch, id);

-- The audit trail is append-only: history is never rewritten.
CREATE TRIGGER admin_events_no_update BEFORE UPDATE ON admin_events
BEGIN
    SELECT RAISE(ABORT, 'admin_events is append-only');
END;

CREATE TRIGGER admin_events_no_delete BEFORE DELETE ON admin_events
BEGIN
    SELECT RAISE(ABORT, 'admin_events is append-only');
END;
