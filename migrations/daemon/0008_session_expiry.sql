-- Admission tokens get a lifetime: 30 days from redemption (studio_contract's
-- ADMISSION_TTL_MS), so a browser's cookie can persist across its restarts without
-- outliving the token it carries. studiod refuses a token past `expires_at_ms` with
-- `session_expired`. (Version 0007 is another change's; versions need not be applied in
-- order.)
--
-- The default only serves the ALTER: a row that somehow kept it would be expired since
-- 1970, so a missed write fails closed. Every row present now is given its 30 days from
-- when it was paired; the figure is written out because a migration never changes.

ALTER TABLE principals ADD COLUMN expires_at_ms INTEGER NOT NULL DEFAULT 0;

UPDATE principals SET expires_at_ms = created_at_ms + 30 * 24 * 60 * 60 * 1000;
