-- Each paired browser has a role (docs/DECISIONS.md): viewer, operator or admin, chosen
-- when its pairing link was minted. Every browser paired before roles existed could do
-- everything: it stays an admin.
ALTER TABLE principals ADD COLUMN role TEXT NOT NULL DEFAULT 'admin'
    CHECK (role IN ('viewer', 'operator', 'admin'));
