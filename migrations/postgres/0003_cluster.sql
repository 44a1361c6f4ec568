-- migrations/daemon/0027_cluster.sql on PostgreSQL: the cluster's term and leader, its
-- members, and the member that runs each run. The leader holds an advisory lock on a
-- session of its own (docs/FLEETS.md); these rows are what it and the others record.

CREATE TABLE cluster (
    id              BIGINT PRIMARY KEY CHECK (id = 1),
    term            BIGINT NOT NULL,
    leader          TEXT COLLATE "C",
    leader_since_ms BIGINT
);
INSERT INTO cluster (id, term) VALUES (1, 0);

CREATE TABLE members (
    id            TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    host          TEXT COLLATE "C" NOT NULL,
    pid           BIGINT NOT NULL,
    addr          TEXT COLLATE "C" NOT NULL,
    started_at_ms BIGINT NOT NULL,
    seen_at_ms    BIGINT NOT NULL,
    stopped_at_ms BIGINT
);

ALTER TABLE runs ADD COLUMN member_id TEXT COLLATE "C";
