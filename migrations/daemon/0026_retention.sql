-- Retention (docs/OPERATIONS.md, "Retention and archives"): the policy in force, a row
-- for each pass, the evidence log's checkpoint (the chain head the live rows continue
-- from once older rows are pruned into archives), a mark on runs whose log folder was
-- pruned, and the indexes a pass needs to null references to a pruned run without a scan.

CREATE TABLE retention_policy (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    -- The policy as JSON (studio_api::types::RetentionPolicy).
    policy        TEXT NOT NULL,
    source        TEXT NOT NULL CHECK (source IN ('api', 'config')),
    updated_at_ms INTEGER NOT NULL,
    updated_by    TEXT
);

CREATE TABLE retention_passes (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    trigger          TEXT NOT NULL CHECK (trigger IN ('clock', 'request')),
    started_at_ms    INTEGER NOT NULL,
    finished_at_ms   INTEGER,
    outcome          TEXT NOT NULL CHECK (outcome IN ('running', 'completed', 'failed')),
    error            TEXT,
    archive_dir      TEXT,
    -- Rows deleted by table, as a JSON object.
    pruned           TEXT NOT NULL DEFAULT '{}',
    archives         INTEGER NOT NULL DEFAULT 0,
    chunks           INTEGER NOT NULL DEFAULT 0,
    longest_chunk_ms REAL NOT NULL DEFAULT 0,
    -- The WAL checkpoint after the pass, as JSON (studio_api::types::WalCheckpoint).
    checkpoint       TEXT
);

-- One row once evidence has been pruned: rows up to `through_seq` are in archives, and
-- the row after it follows `chain_sha256`.
CREATE TABLE evidence_checkpoint (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq   INTEGER NOT NULL,
    chain_sha256  TEXT NOT NULL,
    at_ms         INTEGER NOT NULL
);

-- The checkpoint names a row that is there, with that row's chain hash, and only moves on.
CREATE TRIGGER evidence_checkpoint_insert BEFORE INSERT ON evidence_checkpoint
WHEN new.chain_sha256 IS NOT (SELECT chain_sha256 FROM evidence WHERE seq = new.through_seq)
BEGIN
    SELECT RAISE(ABORT, 'an evidence checkpoint names a stored row and its chain hash');
END;

CREATE TRIGGER evidence_checkpoint_update BEFORE UPDATE ON evidence_checkpoint
WHEN new.through_seq < old.through_seq
    OR new.chain_sha256 IS NOT (SELECT chain_sha256 FROM evidence WHERE seq = new.through_seq)
BEGIN
    SELECT RAISE(ABORT, 'the evidence checkpoint only moves on, to a stored row');
END;

CREATE TRIGGER evidence_checkpoint_no_delete BEFORE DELETE ON evidence_checkpoint
BEGIN
    SELECT RAISE(ABORT, 'the evidence checkpoint is never removed');
END;

-- Evidence stays append-only, except that rows behind the checkpoint may be pruned.
DROP TRIGGER evidence_no_delete;
CREATE TRIGGER evidence_no_delete BEFORE DELETE ON evidence
WHEN old.seq > COALESCE((SELECT through_seq FROM evidence_checkpoint WHERE id = 1), 0)
BEGIN
    SELECT RAISE(ABORT, 'evidence is append-only: only rows behind its checkpoint are pruned');
END;

ALTER TABLE runs ADD COLUMN logs_pruned_at_ms INTEGER;

CREATE INDEX runs_by_chain_parent ON runs (chain_parent_id) WHERE chain_parent_id IS NOT NULL;
CREATE INDEX runs_by_replaced ON runs (replaces_run_id) WHERE replaces_run_id IS NOT NULL;
-- The oldest finished runs whose logs are still kept (the log cap).
CREATE INDEX runs_logs_kept ON runs (finished_at_ms, id)
    WHERE logs_pruned_at_ms IS NULL AND finished_at_ms IS NOT NULL;
-- Delivered and dead notifications by when they ended (their last change).
CREATE INDEX notify_ended ON notify_outbox (status, updated_at_ms, id) WHERE status <> 'pending';
