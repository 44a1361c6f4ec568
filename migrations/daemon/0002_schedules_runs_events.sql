-- The scheduler's tables: schedules, runs (one row per occurrence, manual trigger or
-- chain step), every status change of a run, and the event log the API streams.
-- Times are integer milliseconds since the Unix epoch (UTC); ids are UUIDv7 text.

CREATE TABLE schedules (
    id               TEXT PRIMARY KEY NOT NULL,
    name             TEXT NOT NULL UNIQUE,
    -- The authored spec, canonical JSON (the one spec type).
    spec             TEXT NOT NULL,
    enabled          INTEGER NOT NULL,
    trigger_kind     TEXT NOT NULL CHECK (trigger_kind IN ('cron', 'every', 'at')),
    timezone         TEXT,
    timezone_source  TEXT,
    -- Origin of an `every` timeline: instants are anchor + k * period.
    anchor_ms        INTEGER NOT NULL,
    -- The cursor: the next instant to fire; NULL when nothing is armed.
    next_fire_at_ms  INTEGER,
    last_fired_at_ms INTEGER,
    -- Top-level runs counted against max_runs (claimed in the fire transaction).
    max_runs         INTEGER,
    runs_counted     INTEGER NOT NULL DEFAULT 0,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    revision         INTEGER NOT NULL DEFAULT 1
);

CREATE INDEX schedules_due ON schedules (next_fire_at_ms) WHERE enabled = 1;

CREATE TABLE runs (
    id               TEXT PRIMARY KEY NOT NULL,
    schedule_id      TEXT REFERENCES schedules (id) ON DELETE SET NULL,
    -- `<schedule id>:<scheduled instant ms>` for occurrences; NULL for manual and chain runs.
    occurrence_key   TEXT UNIQUE,
    kind             TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual', 'recovery', 'chain')),
    status           TEXT NOT NULL CHECK (status IN
                       ('queued', 'running', 'completed', 'failed', 'timed_out', 'cancelled', 'skipped')),
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
    -- What follows this run: {"on_success": FollowUp?, "on_fail": FollowUp?}.
    follow_ups       TEXT
);

CREATE INDEX runs_by_created ON runs (created_at_ms DESC, id DESC);
CREATE INDEX runs_by_schedule ON runs (schedule_id, created_at_ms DESC);
CREATE INDEX runs_active ON runs (status) WHERE status IN ('queued', 'running');

CREATE TABLE run_transitions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL,
    from_status  TEXT,
    to_status    TEXT NOT NULL,
    reason       TEXT,
    at_ms        INTEGER NOT NULL
);

CREATE INDEX run_transitions_by_run ON run_transitions (run_id, id);

CREATE TABLE events (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms  INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    data   TEXT NOT NULL
);
