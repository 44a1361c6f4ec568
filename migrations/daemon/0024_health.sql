-- Readiness (docs/OPERATIONS.md, "Health and metrics"): one row a readiness check writes
-- and commits, so "the store is writable" means a write reached the database.

CREATE TABLE health_probe (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at_ms  INTEGER NOT NULL
);
