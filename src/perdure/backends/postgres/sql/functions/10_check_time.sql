-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A time given by a caller: finite and within 100 years of now.
CREATE OR REPLACE FUNCTION check_time(p_what text, p_at timestamptz) RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_at IS NOT NULL AND NOT p_at BETWEEN perdure_now() - interval '100 years'
                                         AND perdure_now() + interval '100 years' THEN
        RAISE EXCEPTION '% % is not within 100 years of now', p_what, p_at
            USING ERRCODE = 'PD001';
    END IF;
END
$$;
