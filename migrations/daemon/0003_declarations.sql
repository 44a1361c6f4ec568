-- Schedules as code (docs/DECLARATIONS.md): who manages a schedule. A schedule created
-- through the API keeps managed_by NULL ("by hand"); one applied from a ScheduleSet
-- document records managed_by = 'declaration', the document's owner key
-- (`<project>/<metadata.name>`) and the source it was applied from.

ALTER TABLE schedules ADD COLUMN managed_by TEXT;
ALTER TABLE schedules ADD COLUMN owner_key TEXT;
ALTER TABLE schedules ADD COLUMN source TEXT;

CREATE INDEX schedules_by_owner ON schedules (owner_key) WHERE owner_key IS NOT NULL;
