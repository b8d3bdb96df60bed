-- Lease tokens are secrets (64 random bits from now on): the 'claimed' events stored
-- before no longer carry the token their claim handed out.
UPDATE events SET data = data - 'lease_token'
WHERE type = 'claimed' AND data ? 'lease_token';
