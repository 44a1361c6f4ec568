-- Approvals and the evidence log (docs/DECISIONS.md).
--
-- `approvals`: one request for a person's decision on one run of an approval-gated
-- schedule, bound to the SHA-256 of the canonical JSON of exactly what will run. A run
-- has at most one open request (pending, or granted and not yet consumed); an edit of
-- its schedule voids the open one and raises another, so a run may have several rows.
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    schedule_id TEXT,
    schedule_name TEXT,
    action_json TEXT NOT NULL,
    action_sha256 TEXT NOT NULL,
    -- A session id, `daemon` (the daemon token), or NULL when the clock fired it.
    requested_by TEXT,
    requested_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    distinct_from_requester INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL CHECK (status IN
        ('pending', 'granted', 'denied', 'expired', 'voided', 'consumed')),
    decided_by TEXT,
    decided_role TEXT,
    decided_origin TEXT,
    decided_at_ms INTEGER,
    reason TEXT
);
CREATE UNIQUE INDEX approvals_open_per_run ON approvals (run_id)
    WHERE status IN ('pending', 'granted');
CREATE INDEX approvals_by_run ON approvals (run_id, requested_at_ms);
CREATE INDEX approvals_by_status ON approvals (status, requested_at_ms, id);
CREATE INDEX approvals_by_schedule ON approvals (schedule_id, requested_at_ms, id);
CREATE INDEX approvals_pending_expiry ON approvals (expires_at_ms) WHERE status = 'pending';

-- `evidence`: each approval step and each approved launch, sealed onto the one before it
-- (content hash, chain hash, MAC under the home's evidence key, which is never here).
-- Written in the transaction of the change it records; never changed nor removed.
CREATE TABLE evidence (
    seq INTEGER PRIMARY KEY,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    -- The entry's content, canonical JSON.
    content TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    chain_sha256 TEXT NOT NULL,
    mac TEXT NOT NULL,
    approval_id TEXT,
    run_id TEXT
);
CREATE INDEX evidence_by_run ON evidence (run_id, seq) WHERE run_id IS NOT NULL;
CREATE INDEX evidence_by_time ON evidence (at_ms, seq);

CREATE TRIGGER evidence_no_update BEFORE UPDATE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'evidence is append-only');
END;
CREATE TRIGGER evidence_no_delete BEFORE DELETE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'evidence is append-only');
END;
