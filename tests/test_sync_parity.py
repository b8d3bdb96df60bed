"""Every *_async method has a sync twin with the same signature and a docstring."""

import inspect

import pytest

from perdure import App, RunHandle


@pytest.mark.parametrize("cls", [App, RunHandle])
def test_async_methods_have_sync_twins(cls: type) -> None:
    pairs = [
        (name[: -len("_async")], getattr(cls, name))
        for name in dir(cls)
        if name.endswith("_async") and not name.startswith("_")
    ]
    assert pairs
    for sync_name, async_fn in pairs:
        if sync_name == "close":  # close() also closes every loop's backends and the portal
            continue
        sync_fn = getattr(cls, sync_name, None)
        assert sync_fn is not None, f"{cls.__name__}.{sync_name} is missing"
        assert inspect.iscoroutinefunction(async_fn) or inspect.isasyncgenfunction(async_fn)
        assert not inspect.iscoroutinefunction(sync_fn)
        if inspect.isasyncgenfunction(async_fn):  # AsyncIterator[T] → Iterator[T]
            sync_params = inspect.signature(sync_fn).parameters
            assert sync_params == inspect.signature(async_fn).parameters, sync_name
        else:
            assert inspect.signature(sync_fn) == inspect.signature(async_fn), sync_name
        assert sync_fn.__doc__ and async_fn.__doc__, sync_name
