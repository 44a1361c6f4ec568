-- Retries of a schedule's occurrence (docs/TASKS.md, "Retries"): a run that failed, timed
-- out or lost its job, whose schedule's `policies.retry` asks for another attempt, keeps
-- when that attempt is due until the attempt is claimed (which clears it, in the same
-- transaction). NULL everywhere else.
ALTER TABLE runs ADD COLUMN retry_at_ms INTEGER;
CREATE INDEX runs_retry_due ON runs (retry_at_ms) WHERE retry_at_ms IS NOT NULL;
