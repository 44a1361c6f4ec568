-- The command allow-list: the machine owner's list of what `command` actions may run,
-- changed at once by `studio allow add|remove` (daemon token only). Each entry is a bare
-- name (found on studiod's own PATH when a run starts) or an absolute path.
CREATE TABLE command_allowlist (
    executable  TEXT PRIMARY KEY,
    added_at_ms INTEGER NOT NULL,
    -- `seed` (STUDIO_COMMAND_ALLOWLIST at the first start) or the principal that added it.
    added_by    TEXT NOT NULL
);

-- Facts studiod records once (here: that the allow-list was seeded, and when).
CREATE TABLE daemon_facts (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The absolute path a run executed: what an allowed name resolved to at its launch.
ALTER TABLE runs ADD COLUMN program TEXT;
