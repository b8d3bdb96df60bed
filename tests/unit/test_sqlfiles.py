from perdure.backends._sqlfiles import compact, load_migrations, load_queries, parse_queries


def test_compact_drops_comments_indentation_and_blank_lines() -> None:
    sql = "-- what it does\n  SELECT a,   -- the a\n\n    b FROM t  -- trailing\n  WHERE x = '--x'"
    assert compact(sql) == "SELECT a,\nb FROM t\nWHERE x = '--x'"


def test_parse_queries() -> None:
    queries = parse_queries(
        "-- name: one\n-- first\nSELECT 1\n\n-- name: two\n-- second\nSELECT 2\n"
    )
    assert queries == {"one": "SELECT 1", "two": "SELECT 2"}


def test_every_dialect_ships_its_queries_and_numbered_migrations() -> None:
    for dialect in ("postgres", "sqlite"):
        queries = load_queries(f"perdure.backends.{dialect}")
        assert queries and all(q and not q.startswith("--") for q in queries.values())
        # psycopg caches the parsing of statements only up to 4 KB.
        assert max(len(q) for q in queries.values()) < 4096
        assert load_migrations(f"perdure.backends.{dialect}")[0].version == 1
