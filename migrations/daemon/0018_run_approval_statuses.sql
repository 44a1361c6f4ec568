-- Runs that wait for a person (docs/DECISIONS.md, "Approvals"): three statuses join the
-- runs table's CHECK — `awaiting_approval` (claimed, not launched), `denied` and
-- `expired` (ended without running) — and each run may name its approval. SQLite
-- changes a CHECK only by rebuilding the table, so this copies every run into a table
-- with the wider CHECK and recreates, as they were, every index, trigger and view that
-- reads runs (0002, 0004, 0005, 0012, 0014). No row changes.

-- A rename refuses while a view names a table that is gone.
DROP VIEW schedule_strips;

CREATE TABLE runs_next (
    id               TEXT PRIMARY KEY NOT NULL,
    schedule_id      TEXT REFERENCES schedules (id) ON DELETE SET NULL,
    occurrence_key   TEXT UNIQUE,
    kind             TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual', 'recovery', 'chain')),
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
    approval_id      TEXT
);

INSERT INTO runs_next (id, schedule_id, occurrence_key, kind, status, reason, action,
        scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid, exit_code,
        signal, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens,
        counted, chain_parent_id, chain_depth, replaces_run_id, follow_ups, program, attempt,
        pid_start_ticks, boot_id, schedule_name, error_line, deadline_at_ms)
    SELECT id, schedule_id, occurrence_key, kind, status, reason, action,
        scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid, exit_code,
        signal, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens,
        counted, chain_parent_id, chain_depth, replaces_run_id, follow_ups, program, attempt,
        pid_start_ticks, boot_id, schedule_name, error_line, deadline_at_ms
    FROM runs;

-- Its indexes and triggers go with it.
DROP TABLE runs;
ALTER TABLE runs_next RENAME TO runs;

-- 0002, 0005, 0012.
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
