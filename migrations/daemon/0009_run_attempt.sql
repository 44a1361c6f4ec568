-- Which attempt at its occurrence a run is: 1, or one more than the run it replaces
-- (a recovery replacement). A job reads it as STUDIO_ATTEMPT.
ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
