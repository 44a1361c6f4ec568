-- Each paired browser's device label ("Firefox 133 on Windows"), made from the
-- User-Agent it paired with by studio_contract::device (never the header itself); NULL
-- when the header named no known browser or system, and for every earlier pairing.
ALTER TABLE principals ADD COLUMN device TEXT;
