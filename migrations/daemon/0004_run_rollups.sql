-- What the cockpit reads on every page, kept current as runs change instead of being
-- recomputed from the runs table on every read (docs/SCHEDULER.md, "Rollups"):
--
-- * on each schedule: whether it has any run, its latest outcome (the newest finished
--   top-level run that completed, failed or timed out) and the spend of all its runs;
-- * run_counts_hourly: how many runs were created in each UTC hour, by current status.
--
-- Triggers keep both exact for every writer, in the writer's own transaction: a rollup
-- can never disagree with the rows it sums, whichever code path (or a crash) wrote them.

ALTER TABLE schedules ADD COLUMN has_runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN last_outcome TEXT;
ALTER TABLE schedules ADD COLUMN last_outcome_at_ms INTEGER;
ALTER TABLE schedules ADD COLUMN spend_usd REAL NOT NULL DEFAULT 0;

CREATE TABLE run_counts_hourly (
    hour_ms  INTEGER NOT NULL,
    status   TEXT NOT NULL,
    runs     INTEGER NOT NULL,
    PRIMARY KEY (hour_ms, status)
) WITHOUT ROWID;

-- Backfill from the rows already stored.
UPDATE schedules SET
    has_runs = EXISTS (SELECT 1 FROM runs WHERE runs.schedule_id = schedules.id),
    spend_usd = COALESCE((SELECT SUM(cost_usd) FROM runs WHERE runs.schedule_id = schedules.id), 0);

UPDATE schedules SET (last_outcome, last_outcome_at_ms) = (
    SELECT status, finished_at_ms FROM runs
    WHERE runs.schedule_id = schedules.id AND kind <> 'chain'
      AND status IN ('completed', 'failed', 'timed_out')
    ORDER BY finished_at_ms DESC LIMIT 1);

INSERT INTO run_counts_hourly (hour_ms, status, runs)
    SELECT created_at_ms - created_at_ms % 3600000, status, COUNT(*) FROM runs GROUP BY 1, 2;

-- A new run: its schedule has runs, the hour counts it, and (rows written already
-- finished) its outcome and cost count at once.
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

-- A status change moves the run between the hour's status counts.
CREATE TRIGGER runs_rollup_status AFTER UPDATE OF status ON runs
    WHEN old.status IS NOT new.status
BEGIN
    UPDATE run_counts_hourly SET runs = runs - 1
        WHERE hour_ms = old.created_at_ms - old.created_at_ms % 3600000 AND status = old.status;
    INSERT INTO run_counts_hourly (hour_ms, status, runs)
        VALUES (new.created_at_ms - new.created_at_ms % 3600000, new.status, 1)
        ON CONFLICT (hour_ms, status) DO UPDATE SET runs = runs + 1;
END;

-- A top-level run that ends is its schedule's latest outcome unless a later one is known.
CREATE TRIGGER runs_rollup_outcome AFTER UPDATE OF status ON runs
    WHEN old.status IS NOT new.status AND new.schedule_id IS NOT NULL AND new.kind <> 'chain'
        AND new.status IN ('completed', 'failed', 'timed_out')
BEGIN
    UPDATE schedules SET last_outcome = new.status, last_outcome_at_ms = new.finished_at_ms
        WHERE id = new.schedule_id
          AND new.finished_at_ms >= COALESCE(last_outcome_at_ms, new.finished_at_ms);
END;

-- Reported cost adds to the schedule's spend.
CREATE TRIGGER runs_rollup_spend AFTER UPDATE OF cost_usd ON runs
    WHEN new.schedule_id IS NOT NULL AND old.cost_usd IS NOT new.cost_usd
BEGIN
    UPDATE schedules SET spend_usd = spend_usd + COALESCE(new.cost_usd, 0) - COALESCE(old.cost_usd, 0)
        WHERE id = new.schedule_id;
END;
