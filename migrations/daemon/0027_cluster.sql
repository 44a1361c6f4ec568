-- The cluster (docs/FLEETS.md, "Leadership and terms"): the studiod processes that share
-- one database, the one that schedules (the leader) and its term. On SQLite the one
-- studiod of the home is its only member and leads from its start; each start takes a
-- new term. A fire's claim checks the term it was decided under in its own statement, so
-- a former leader that wakes after losing office writes no fire.

CREATE TABLE cluster (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    -- Bumped by each member that takes the lead: a fencing token.
    term            INTEGER NOT NULL,
    leader          TEXT,
    leader_since_ms INTEGER
);
INSERT INTO cluster (id, term) VALUES (1, 0);

-- One row per studiod home that ever joined (its id is kept in the home: run/member).
CREATE TABLE members (
    id            TEXT PRIMARY KEY NOT NULL,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    addr          TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    -- Its last heartbeat (every second while it runs on a shared database).
    seen_at_ms    INTEGER NOT NULL,
    stopped_at_ms INTEGER
);

-- The member that runs (or will run) a run on its own machine: its recovery and its
-- stale-run reaper look at its own runs only. NULL on rows from before this step (the
-- home's one studiod ran them).
ALTER TABLE runs ADD COLUMN member_id TEXT;
