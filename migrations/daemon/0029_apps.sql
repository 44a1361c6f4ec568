-- studio-apps on other hosts (docs/FLEETS.md, "Split hosts"): each enrolled app, bound to
-- the one client certificate studiod's authority issued it, and the one-time join
-- tokens that enrol them (kept as digests only). The apps listener looks a connection's
-- certificate up here on every request: a revoked app's next request is refused.

CREATE TABLE apps (
    id                TEXT PRIMARY KEY NOT NULL,
    name              TEXT NOT NULL,
    cert_sha256       TEXT NOT NULL UNIQUE,
    cert_serial       TEXT NOT NULL,
    cert_not_after_ms INTEGER NOT NULL,
    enrolled_at_ms    INTEGER NOT NULL,
    revoked_at_ms     INTEGER
);

CREATE TABLE app_join_tokens (
    digest        TEXT PRIMARY KEY NOT NULL,
    created_by    TEXT,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    used_at_ms    INTEGER,
    app_id        TEXT
);
