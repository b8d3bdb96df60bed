import logging

import pytest

from perdure._logging import RateLimit


def test_repeated_warnings_are_held_back_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("perdure.test.ratelimit")
    limit = RateLimit(interval=3600)
    logger.addFilter(limit)
    try:
        with caplog.at_level(logging.INFO, logger="perdure.test.ratelimit"):
            for n in range(50):
                logger.warning("database unreachable: %s", n)
            logger.info("info always passes")
            logger.warning("another kind of warning")
        messages = [r.getMessage() for r in caplog.records]
        assert messages == [
            "database unreachable: 0",
            "info always passes",
            "another kind of warning",
        ]
        limit.interval = 0
        logger.warning("database unreachable: %s", "back")
        assert caplog.records[-1].getMessage() == (
            "database unreachable: back (49 more like this in the last 0s)"
        )
    finally:
        logger.removeFilter(limit)
