import re

import pytest

from perdure.backends._sqlfiles import (
    compact,
    function_set,
    load_migrations,
    load_queries,
    parse_queries,
)


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
        # psycopg caches the parsing of statements only up to 4 KB. The limited claim
        # is longer: parsing it costs about 40 us per claim, against a round trip.
        long = {"claim_runs_limited", "claim_select_limited"}
        assert max(len(q) for name, q in queries.items() if name not in long) < 4096
        assert load_migrations(f"perdure.backends.{dialect}")[0].version == 1


def test_a_query_includes_a_shared_part_of_its_file() -> None:
    queries = parse_queries(
        "-- name: _cols\n-- the columns\na, b\n\n"
        "-- name: one\nSELECT {{_cols}}\nFROM t\n\n-- name: two\nSELECT {{_cols}} FROM u\n"
    )
    assert queries["one"] == "SELECT a, b\nFROM t"
    assert queries["two"] == "SELECT a, b FROM u"


def test_an_include_of_a_missing_or_nested_part_is_refused() -> None:
    with pytest.raises(ValueError, match="names no query"):
        parse_queries("-- name: one\nSELECT {{nope}}\n")
    with pytest.raises(ValueError, match="one level only"):
        parse_queries("-- name: a\nx\n-- name: b\n{{a}}\n-- name: c\n{{b}}\n")


def test_a_function_runs_a_query_of_the_file_with_its_parameters_from_its_record() -> None:
    package = "perdure.backends.postgres"
    text = function_set(package).text_of("51_apply_transitions.sql")
    statement = load_queries(package)["apply_transition"]
    assert "{{" not in text and "%(" not in text
    assert re.sub(r"%\((\w+)\)s", r"t.\1", statement) in text
    assert "WHERE r.id = t.run_id::text AND r.lease_token = t.token::bigint" in text
