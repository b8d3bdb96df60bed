-- Lease tokens are secrets (64 random bits from now on): the 'claimed' events stored
-- before no longer carry the token their claim handed out.
UPDATE events SET data = json_remove(data, '$.lease_token')
WHERE type = 'claimed' AND json_extract(data, '$.lease_token') IS NOT NULL;
