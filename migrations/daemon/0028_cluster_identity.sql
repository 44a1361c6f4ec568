-- Identity that belongs to the cluster, not to a member (docs/FLEETS.md, "Cluster-wide
-- identity"): the epoch every member admits under, and pairing codes as rows, so a code
-- minted through one studiod is redeemed through any. On SQLite the home's one studiod
-- still starts a new epoch at each start and records it here.

ALTER TABLE cluster ADD COLUMN epoch TEXT;

-- Only the code's SHA-256 digest: a copy of the database yields no usable code. A code
-- is spent once (the spending statement sets `spent_at_ms` where it is NULL), and rows
-- of spent, expired or earlier-epoch codes are removed when the next code is minted.
CREATE TABLE pairing_codes (
    digest        BLOB PRIMARY KEY NOT NULL,
    epoch         TEXT NOT NULL REFERENCES epochs (epoch),
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    minted_at_ms  INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    spent_at_ms   INTEGER
);
CREATE INDEX pairing_codes_by_epoch ON pairing_codes (epoch, minted_at_ms);
