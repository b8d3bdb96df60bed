"""The codec wrapper decides, for every method of the storage contract, whether its
values are sealed or passed through: a contract method added later fails this test
until it is given that decision in `perdure._codec_backend`."""

from __future__ import annotations

import inspect

from perdure import _codec_backend
from perdure.backends.base import Backend


def test_every_contract_method_is_defined_by_the_codec_wrapper() -> None:
    defined = {
        name
        for name, member in vars(Backend).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }
    generated = {
        name
        for name in defined
        if (getattr(_codec_backend.CodecBackend, name).__doc__ or "").startswith("``inner.")
    }
    assert generated == set(), f"decide how the codec treats {sorted(generated)}"
