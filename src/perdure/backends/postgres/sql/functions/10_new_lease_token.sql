-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A new lease token: 64 random bits from the server's strong random source (a v4
-- uuid's two halves XORed: the fixed version and variant bits of each half meet
-- random bits of the other), never 0 (the token of a run never claimed). A token
-- cannot be guessed from the claim's time, and one a crash undid is not handed out
-- again (docs/storage.md). Tokens are compared for equality only: nothing orders them.
CREATE OR REPLACE FUNCTION new_lease_token() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_bits bit(128) := ('x' || encode(uuid_send(gen_random_uuid()), 'hex'))::bit(128);
BEGIN
    RETURN coalesce(nullif(
        (substring(v_bits FROM 1 FOR 64) # substring(v_bits FROM 65 FOR 64))::bigint, 0), 1);
END
$$;
