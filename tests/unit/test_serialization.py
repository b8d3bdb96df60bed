import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perdure import SerializationError
from perdure.serialization import decode, encode, error_from_exception

safe_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | safe_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(safe_text, inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_round_trip(value: object) -> None:
    assert decode(encode(value, what="v")) == value


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_dataclasses_and_tuples_become_json() -> None:
    assert decode(encode({"p": Point(1, 2), "t": (1, 2)}, what="v")) == {
        "p": {"x": 1, "y": 2},
        "t": [1, 2],
    }


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        math.inf,
        {1, 2},
        b"bytes",
        object(),
        "nul\x00char",
        "lone\ud800surrogate",
        {"k": math.nan},
    ],
)
def test_rejects_what_the_database_cannot_store(bad: object) -> None:
    with pytest.raises(SerializationError, match="step 'x'"):
        encode(bad, what="step 'x'")


def test_escaped_backslash_u0000_text_is_fine() -> None:
    assert decode(encode("\\u0000", what="v")) == "\\u0000"


def test_rejects_deep_nesting() -> None:
    value: object = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(SerializationError, match="nested more than 64 levels"):
        encode(value, what="v")


def test_size_limit() -> None:
    with pytest.raises(SerializationError, match="over the limit of 1024 bytes"):
        encode("x" * 2000, what="v", max_bytes=1024)


def test_error_description() -> None:
    try:
        raise KeyError("missing")
    except KeyError as exc:
        error = error_from_exception(exc, step="a", attempt=2, nothing=None)
    assert error["type"] == "KeyError"
    assert error["step"] == "a" and error["attempt"] == 2 and "nothing" not in error
    assert "Traceback" in error["traceback"]


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_up_to_64_levels_is_stored_and_deeper_is_refused() -> None:
    assert decode(encode(_nested(64), what="v")) == _nested(64)
    with pytest.raises(SerializationError, match="nested more than 64 levels"):
        encode(_nested(65), what="the input")
    with pytest.raises(SerializationError, match="nested more than 64 levels"):
        encode({"a": _nested(970)}, what="the input")  # once a worker-killing input


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = "[" * 200
    assert decode(encode([text, {"k": text}], what="v")) == [text, {"k": text}]


def test_a_value_over_10_mib_is_refused_whatever_the_setting() -> None:
    big = "x" * (10 * 1024 * 1024)
    with pytest.raises(SerializationError, match="over the limit of 10485760 bytes"):
        encode(big, what="v", max_bytes=50 * 1024 * 1024)


@pytest.mark.parametrize("value", [1e16, 1.5e300, -3.602879701896397e16, 2e22])
def test_integral_floats_are_written_in_full_so_jsonb_keeps_them_floats(value: float) -> None:
    text = encode({"v": value}, what="v")
    assert "e" not in text and text.endswith(".0}")
    assert decode(text) == {"v": value} and isinstance(decode(text)["v"], float)


def test_stored_text_too_deep_to_decode_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="nested"):
        decode("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SerializationError, match="not valid JSON"):
        decode("{nope")
