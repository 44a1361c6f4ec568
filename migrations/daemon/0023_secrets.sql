-- Secrets for jobs (docs/OPERATIONS.md, "Secrets"): each value sealed with AES-256-GCM
-- under the home's key (run/secrets.key, never here), its name the associated data.
-- Nothing in this table discloses a value without that key file.

CREATE TABLE secrets (
    name          TEXT PRIMARY KEY NOT NULL,
    nonce         BLOB NOT NULL CHECK (length(nonce) = 12),
    ciphertext    BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    -- The principal that last set it.
    updated_by    TEXT
);
