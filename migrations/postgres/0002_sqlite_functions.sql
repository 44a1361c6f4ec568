-- The few SQLite functions studiod's statements use, as PostgreSQL functions with the same
-- results for the values studiod passes them, so that a statement is one text on both
-- databases. Each is plain SQL over PostgreSQL's own functions (strpos, jsonb), marked
-- IMMUTABLE so the planner may inline it.

-- A SQLite JSON path ('$', '$.a', '$.a.b'; studiod uses no other form) as the text[] path
-- of PostgreSQL's #> and #>> operators.
CREATE FUNCTION studio_json_path(path TEXT) RETURNS TEXT[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT CASE WHEN path = '$' THEN ARRAY[]::TEXT[]
                      ELSE string_to_array(substr(path, 3), '.') END $$;

-- instr(haystack, needle): the 1-based position of needle in haystack, 0 when absent.
CREATE FUNCTION instr(haystack TEXT, needle TEXT) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT strpos(haystack, needle) $$;

-- json_extract(doc, path): the value at path as text (a string unquoted, an array or an
-- object as JSON text), NULL when absent or JSON null. Unlike SQLite it returns text for
-- numbers too: a statement that computes with one casts it (CAST(… AS BIGINT)).
CREATE FUNCTION json_extract(doc TEXT, path TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT doc::jsonb #>> studio_json_path(path) $$;

-- json_each(doc, path): one row per element of the array, or per value of the object, at
-- path, its `value` as json_extract gives it; no row for anything else.
CREATE FUNCTION json_each(doc TEXT, path TEXT) RETURNS TABLE (value TEXT)
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
        SELECT e.v FROM (SELECT doc::jsonb #> studio_json_path(path) AS j) AS d,
        LATERAL (
            SELECT a.v FROM jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(d.j) = 'array' THEN d.j ELSE '[]'::jsonb END) AS a(v)
            UNION ALL
            SELECT o.v FROM jsonb_each_text(
                CASE WHEN jsonb_typeof(d.j) = 'object' THEN d.j ELSE '{}'::jsonb END) AS o(k, v)
        ) AS e(v)
    $$;

-- json_each(doc): the same at the top level ('$'): how studiod passes a list of ids or
-- words as one bound JSON array.
CREATE FUNCTION json_each(doc TEXT) RETURNS TABLE (value TEXT)
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT e.value FROM json_each(doc, '$') AS e $$;

-- json_group_array(x): the aggregated values as a JSON array's text, '[]' over no row.
CREATE FUNCTION studio_json_append(acc JSONB, x TEXT) RETURNS JSONB
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT acc || jsonb_build_array(x) $$;
CREATE FUNCTION studio_jsonb_text(acc JSONB) RETURNS TEXT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT acc::text $$;
CREATE AGGREGATE json_group_array(TEXT) (
    SFUNC = studio_json_append,
    STYPE = JSONB,
    FINALFUNC = studio_jsonb_text,
    INITCOND = '[]'
);
