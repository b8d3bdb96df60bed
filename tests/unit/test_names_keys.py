import pytest

from perdure.engine.keys import KeyAllocator
from perdure.ids import is_run_id, new_run_id
from perdure.names import glob_matches, validate_step_name, validate_workflow_name


def test_keys_index_repeated_names() -> None:
    keys = KeyAllocator()
    assert [keys.next(n) for n in ["a", "b", "a", "a", "b"]] == ["a", "b", "a:1", "a:2", "b:1"]


@pytest.mark.parametrize("name", ["a", "billing.invoice-2", "X_1", "a" * 128])
def test_good_workflow_names(name: str) -> None:
    assert validate_workflow_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "-a", "a b", "a/b", "../x", "a" * 129, "é", None, 3, "a:b", "a\x00"]
)
def test_bad_workflow_names(name: object) -> None:
    with pytest.raises(ValueError, match="invalid workflow name"):
        validate_workflow_name(name)


@pytest.mark.parametrize("name", ["", "a:1", "with space", "x" * 129, "<script>", None])
def test_bad_step_names(name: object) -> None:
    with pytest.raises(ValueError, match="invalid step name"):
        validate_step_name(name)


def test_globs() -> None:
    assert glob_matches("billing.*", "billing.invoice")
    assert glob_matches("*", "a.b.c")
    assert not glob_matches("billing.*", "shipping.label")


def test_run_ids_sort_by_time() -> None:
    a, b = new_run_id(1_000), new_run_id(2_000)
    assert is_run_id(a) and is_run_id(b) and a < b and len(a) == 26
    assert not is_run_id("nope")
