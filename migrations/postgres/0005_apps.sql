-- daemon/0029: studio-apps on other hosts and their one-time join tokens.

CREATE TABLE apps (
    id                TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    name              TEXT COLLATE "C" NOT NULL,
    cert_sha256       TEXT COLLATE "C" NOT NULL UNIQUE,
    cert_serial       TEXT COLLATE "C" NOT NULL,
    cert_not_after_ms BIGINT NOT NULL,
    enrolled_at_ms    BIGINT NOT NULL,
    revoked_at_ms     BIGINT
);

CREATE TABLE app_join_tokens (
    digest        TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    created_by    TEXT COLLATE "C",
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    used_at_ms    BIGINT,
    app_id        TEXT COLLATE "C"
);
