-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A topic pattern ('*' matches any characters) as a LIKE pattern with escape '\'.
CREATE OR REPLACE FUNCTION like_pattern(p_pattern text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    RETURN replace(replace(replace(replace(p_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%');
END
$$;
