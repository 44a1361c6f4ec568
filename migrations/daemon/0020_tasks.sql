-- On-demand tasks (docs/TASKS.md). A task is one durable submission; each attempt is a
-- run of kind `task` naming its task, the worker that ran it, its lease's fencing token
-- and when that lease expires. SQLite changes a CHECK only by rebuilding the table, so,
-- as in 0018, every run is copied into a table with the wider CHECK and the new columns,
-- and every index, trigger and view that reads runs is recreated as it was. No run row
-- changes.

CREATE TABLE tasks (
    id                 TEXT PRIMARY KEY NOT NULL,
    idempotency_key    TEXT UNIQUE,
    -- The submitted spec, canonical JSON, and its SHA-256 (what a resubmission compares).
    spec               TEXT NOT NULL,
    spec_sha256        TEXT NOT NULL,
    -- The sorted labels joined by ',' (empty for none): what a worker must have.
    labels_key         TEXT NOT NULL DEFAULT '',
    priority           INTEGER NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9),
    concurrency_key    TEXT,
    concurrency_limit  INTEGER,
    status             TEXT NOT NULL CHECK (status IN
                         ('queued', 'leased', 'running', 'completed', 'failed', 'timed_out',
                          'cancelled', 'retry_wait', 'awaiting_approval', 'denied', 'expired')),
    reason             TEXT,
    attempts           INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL DEFAULT 1,
    next_attempt_at_ms INTEGER,
    last_run_id        TEXT,
    submitted_by       TEXT,
    approval_id        TEXT,
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    finished_at_ms     INTEGER
);
-- The claim's walk: per label set and priority, oldest first.
CREATE INDEX tasks_queued ON tasks (labels_key, priority, created_at_ms, id)
    WHERE status = 'queued';
CREATE INDEX tasks_by_created ON tasks (created_at_ms DESC, id DESC);
CREATE INDEX tasks_by_status ON tasks (status, created_at_ms DESC, id DESC);
CREATE INDEX tasks_by_concurrency ON tasks (concurrency_key, status)
    WHERE concurrency_key IS NOT NULL;
CREATE INDEX tasks_retry_due ON tasks (next_attempt_at_ms) WHERE status = 'retry_wait';

-- The last fencing token issued: every lease takes the next one.
CREATE TABLE fences (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT INTO fences (id, last) VALUES (1, 0);

-- A rename refuses while a view names a table that is gone.
DROP VIEW schedule_strips;

CREATE TABLE runs_next (
    id               TEXT PRIMARY KEY NOT NULL,
    schedule_id      TEXT REFERENCES schedules (id) ON DELETE SET NULL,
    occurrence_key   TEXT UNIQUE,
    kind             TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual', 'recovery', 'chain', 'task')),
    status           TEXT NOT NULL CHECK (status IN
                       ('queued', 'running', 'completed', 'failed', 'timed_out', 'cancelled',
                        'skipped', 'awaiting_approval', 'denied', 'expired')),
    reason           TEXT,
    action           TEXT NOT NULL,
    scheduled_at_ms  INTEGER,
    created_at_ms    INTEGER NOT NULL,
    dispatched_at_ms INTEGER,
    finished_at_ms   INTEGER,
    pid              INTEGER,
    exit_code        INTEGER,
    signal           INTEGER,
    stdout_tail      TEXT,
    stderr_tail      TEXT,
    stdout_bytes     INTEGER,
    stderr_bytes     INTEGER,
    cost_usd         REAL,
    tokens           INTEGER,
    counted          INTEGER NOT NULL DEFAULT 0,
    chain_parent_id  TEXT,
    chain_depth      INTEGER NOT NULL DEFAULT 0,
    replaces_run_id  TEXT,
    follow_ups       TEXT,
    program          TEXT,
    attempt          INTEGER NOT NULL DEFAULT 1,
    pid_start_ticks  INTEGER,
    boot_id          TEXT,
    schedule_name    TEXT,
    error_line       TEXT,
    deadline_at_ms   INTEGER,
    approval_id      TEXT,
    task_id          TEXT,
    worker_id        TEXT,
    fence            INTEGER,
    lease_expires_at_ms INTEGER
);

INSERT INTO runs_next (id, schedule_id, occurrence_key, kind, status, reason, action,
        scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid, exit_code,
        signal, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens,
        counted, chain_parent_id, chain_depth, replaces_run_id, follow_ups, program, attempt,
        pid_start_ticks, boot_id, schedule_name, error_line, deadline_at_ms, approval_id)
    SELECT id, schedule_id, occurrence_key, kind, status, reason, action,
        scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid, exit_code,
        signal, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens,
        counted, chain_parent_id, chain_depth, replaces_run_id, follow_ups, program, attempt,
        pid_start_ticks, boot_id, schedule_name, error_line, deadline_at_ms, approval_id
    FROM runs;

-- Its indexes and triggers go with it.
DROP TABLE runs;
ALTER TABLE runs_next RENAME TO runs;

-- 0002, 0005, 0012 (as 0018 left them).
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, id DESC);
CREATE INDEX runs_active ON runs (status) WHERE status IN ('queued', 'running');
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_schedule ON runs (schedule_id, created_at_ms DESC, id DESC, status, error_line);

-- 0004: the rollups.
CREATE TRIGGER runs_rollup_insert AFTER INSERT ON runs
BEGIN
    INSERT INTO run_counts_hourly (hour_ms, status, runs)
        VALUES (new.created_at_ms - new.created_at_ms % 3600000, new.status, 1)
        ON CONFLICT (hour_ms, status) DO UPDATE SET runs = runs + 1;
    UPDATE schedules SET
        has_runs = 1,
        spend_usd = spend_usd + COALESCE(new.cost_usd, 0),
        last_outcome = CASE WHEN new.kind <> 'chain'
                AND new.status IN ('completed', 'failed', 'timed_out')
                AND new.finished_at_ms >= COALESCE(last_outcome_at_ms, new.finished_at_ms)
            THEN new.status ELSE last_outcome END,
        last_outcome_at_ms = CASE WHEN new.kind <> 'chain'
                AND new.status IN ('completed', 'failed', 'timed_out')
                AND new.finished_at_ms >= COALESCE(last_outcome_at_ms, new.finished_at_ms)
            THEN new.finished_at_ms ELSE last_outcome_at_ms END
        WHERE id = new.schedule_id;
END;

CREATE TRIGGER runs_rollup_status AFTER UPDATE OF status ON runs
    WHEN old.status IS NOT new.status
BEGIN
    UPDATE run_counts_hourly SET runs = runs - 1
        WHERE hour_ms = old.created_at_ms - old.created_at_ms % 3600000 AND status = old.status;
    INSERT INTO run_counts_hourly (hour_ms, status, runs)
        VALUES (new.created_at_ms - new.created_at_ms % 3600000, new.status, 1)
        ON CONFLICT (hour_ms, status) DO UPDATE SET runs = runs + 1;
END;

CREATE TRIGGER runs_rollup_outcome AFTER UPDATE OF status ON runs
    WHEN old.status IS NOT new.status AND new.schedule_id IS NOT NULL AND new.kind <> 'chain'
        AND new.status IN ('completed', 'failed', 'timed_out')
BEGIN
    UPDATE schedules SET last_outcome = new.status, last_outcome_at_ms = new.finished_at_ms
        WHERE id = new.schedule_id
          AND new.finished_at_ms >= COALESCE(last_outcome_at_ms, new.finished_at_ms);
END;

CREATE TRIGGER runs_rollup_spend AFTER UPDATE OF cost_usd ON runs
    WHEN new.schedule_id IS NOT NULL AND old.cost_usd IS NOT new.cost_usd
BEGIN
    UPDATE schedules SET spend_usd = spend_usd + COALESCE(new.cost_usd, 0) - COALESCE(old.cost_usd, 0)
        WHERE id = new.schedule_id;
END;

-- 0014: the strips.
CREATE VIEW schedule_strips AS
SELECT s.id AS schedule_id,
       (SELECT json_group_array(json_array(id, status, created_at_ms, error_line))
        FROM (SELECT id, status, created_at_ms, error_line FROM runs
              WHERE runs.schedule_id = s.id
              ORDER BY created_at_ms DESC, id DESC LIMIT 10)) AS marks
FROM schedules AS s;

CREATE TRIGGER runs_strip_insert AFTER INSERT ON runs
WHEN new.schedule_id IS NOT NULL
BEGIN
    UPDATE schedules SET recent_runs =
        (SELECT marks FROM schedule_strips WHERE schedule_id = new.schedule_id)
    WHERE id = new.schedule_id;
END;

CREATE TRIGGER runs_strip_update AFTER UPDATE OF status, error_line ON runs
WHEN new.schedule_id IS NOT NULL
BEGIN
    UPDATE schedules SET recent_runs =
        (SELECT marks FROM schedule_strips WHERE schedule_id = new.schedule_id)
    WHERE id = new.schedule_id;
END;

CREATE TRIGGER runs_strip_delete AFTER DELETE ON runs
WHEN old.schedule_id IS NOT NULL
    AND instr((SELECT recent_runs FROM schedules WHERE id = old.schedule_id), old.id) > 0
BEGIN
    UPDATE schedules SET recent_runs =
        (SELECT marks FROM schedule_strips WHERE schedule_id = old.schedule_id)
    WHERE id = old.schedule_id;
END;

-- The attempts of a task, in order.
CREATE INDEX runs_by_task ON runs (task_id, attempt) WHERE task_id IS NOT NULL;
