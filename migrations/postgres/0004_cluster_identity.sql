-- migrations/daemon/0028_cluster_identity.sql on PostgreSQL: the cluster's epoch and
-- pairing codes as rows (docs/FLEETS.md, "Cluster-wide identity").

ALTER TABLE cluster ADD COLUMN epoch TEXT COLLATE "C";

CREATE TABLE pairing_codes (
    digest        BYTEA PRIMARY KEY NOT NULL,
    epoch         TEXT COLLATE "C" NOT NULL REFERENCES epochs (epoch),
    role          TEXT COLLATE "C" NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    minted_at_ms  BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    spent_at_ms   BIGINT
);
CREATE INDEX pairing_codes_by_epoch ON pairing_codes (epoch, minted_at_ms);
