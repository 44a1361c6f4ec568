-- The attention queue's operator decisions (app.db, owned by studio-app).
-- The queue itself is derived from studiod's runs and schedules on every read; only what
-- an operator decided about one derived item is stored here.

-- One row per item id (`run:<id>` | `sched:<id>`). `state` NULL is a tombstone: the
-- disposition was deleted, and its `revision` fences a stale PUT from resurrecting it.
CREATE TABLE dispositions (
    item_id      TEXT PRIMARY KEY NOT NULL,
    state        TEXT CHECK (state IS NULL OR state IN ('acknowledged', 'resolved', 'expected', 'snoozed')),
    reason       TEXT NOT NULL,
    until_ms     INTEGER,
    -- The newest failure instant the decision covered: newer evidence lapses it.
    covers_ms    INTEGER NOT NULL,
    revision     INTEGER NOT NULL CHECK (revision >= 1),
    principal_id TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    CHECK ((state = 'snoozed') = (until_ms IS NOT NULL) OR state IS NULL)
);

-- Every PUT and DELETE, in order: who decided what, when and why.
CREATE TABLE disposition_history (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id      TEXT NOT NULL,
    op           TEXT NOT NULL CHECK (op IN ('put', 'delete')),
    state        TEXT,
    reason       TEXT NOT NULL,
    until_ms     INTEGER,
    covers_ms    INTEGER,
    revision     INTEGER NOT NULL,
    principal_id TEXT NOT NULL,
    at_ms        INTEGER NOT NULL
);

CREATE INDEX disposition_history_item ON disposition_history (item_id, id);

CREATE TRIGGER disposition_history_no_update BEFORE UPDATE ON disposition_history
BEGIN
    SELECT RAISE(ABORT, 'disposition_history is append-only');
END;

CREATE TRIGGER disposition_history_no_delete BEFORE DELETE ON disposition_history
BEGIN
    SELECT RAISE(ABORT, 'disposition_history is append-only');
END;
