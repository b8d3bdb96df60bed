"""REST's names in the messages of errors raised below the REST edge
(`perdure.server.wire_names`): Python's parameter names become the wire's, what the
caller sent (quoted) stays as sent."""

from __future__ import annotations

from perdure.server.wire_names import rest_names


def test_python_names_become_rest_names_outside_quotes() -> None:
    assert rest_names("cursor must be the next_cursor of a previous page, got 'x'") == (
        "cursor must be the nextCursor of a previous page, got 'x'"
    )
    assert rest_names("run_id must be 1-255 characters; got 'run_id/1'") == (
        "runId must be 1-255 characters; got 'run_id/1'"
    )
    assert rest_names('the run\'s from_step and parent_id: "from_step"') == (
        'the run\'s fromStep and parentId: "from_step"'
    )
    # a longer name or part of a dotted path is not a parameter
    assert rest_names("my_run_id and input.run_id") == "my_run_id and input.run_id"
