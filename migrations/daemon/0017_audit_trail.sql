-- The audit trail of every mutation (docs/DECISIONS.md): the one append-only table
-- `admin_events` now also says, for a change made through the API, the role and origin
-- of the principal who made it, the object it changed ("schedule:ID", "run:ID") and the
-- schedule it concerns, so a schedule's history is one indexed read. Each such row is
-- written in the transaction of the change it records. Earlier rows keep NULL.
ALTER TABLE admin_events ADD COLUMN role TEXT;
ALTER TABLE admin_events ADD COLUMN origin TEXT;
ALTER TABLE admin_events ADD COLUMN object TEXT;
ALTER TABLE admin_events ADD COLUMN schedule_id TEXT;

CREATE INDEX admin_events_by_schedule ON admin_events (schedule_id, id)
    WHERE schedule_id IS NOT NULL;
CREATE INDEX admin_events_by_object ON admin_events (object, id) WHERE object IS NOT NULL;
CREATE INDEX admin_events_by_principal ON admin_events (principal_id, id)
    WHERE principal_id IS NOT NULL;
CREATE INDEX admin_events_by_kind ON admin_events (kind, id);
