"""Flow-control options of a workflow: concurrency, per-key concurrency, rate limits
and FIFO keys (pure: parsing, validation and the keys of one start).

The limits are enforced by the claim itself (the backends' limited claim query);
this module only decides what a run carries. Its keys are computed once, at start,
from the run's input as JSON (a dict for ``input["tenant"]``), and stored with the
run: a key function is never called again, so changing it affects new runs only.

A run's *lane* is the key that fairness rotates over: its concurrency key, else its
FIFO key, else its rate-limit key, else ``""`` (the workflow's one lane).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from .durations import Duration, to_seconds
from .errors import ConfigurationError, ValidationError
from .records import NewRun, WorkflowLimits
from .validation import MAX_KEY_LENGTH, check_int, check_key

__all__ = [
    "NO_LIMITS",
    "KeyFn",
    "Limits",
    "RunKeys",
    "claim_limits",
    "flow_control",
    "parse_rate_limit",
]

#: A key function: the run's input (as JSON) to a str or int key.
KeyFn = Callable[[Any], Any]

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S.*?)\s*$")
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_UNITS |= {"h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}


def parse_rate_limit(text: object) -> tuple[int, float]:
    """``"100/m"`` → (100, 60.0): at most N starts in any window of that length.

    The period is a unit (``s``, ``m``, ``h``, ``d``) or a duration (``"100/30s"``).
    """
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigurationError(
            "rate_limit must look like '100/m' (a count, '/', a unit or duration), "
            f"got {text!r:.80}"
        )
    count = int(match.group(1))
    if not 1 <= count < 2**31:
        raise ConfigurationError(f"rate_limit count must be 1 or more, got {count}")
    unit = match.group(2)
    period = _UNITS.get(unit)
    if period is None:
        try:
            period = to_seconds(unit, what="rate_limit period")
        except ValidationError as exc:
            raise ConfigurationError(str(exc)) from None
    if not 0 < period <= 366 * 86400:
        raise ConfigurationError(
            f"rate_limit period must be more than 0 and at most a year, got {unit!r}"
        )
    return count, period


@dataclass(frozen=True, slots=True)
class RunKeys:
    """The keys one start stores with its run (None: that limit does not apply)."""

    lane: str | None = None
    fifo: str | None = None
    rate: str | None = None


NO_KEYS = RunKeys()


@dataclass(frozen=True, slots=True)
class Limits:
    """A workflow's flow-control options, validated (see `App.workflow`)."""

    concurrency: int | None = None
    concurrency_key: KeyFn | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    rate_limit_key: KeyFn | None = None
    fifo_key: KeyFn | None = None

    @classmethod
    def build(
        cls,
        workflow: str,
        *,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> Limits:
        """Validate the decorator's options; a bad combination is a `ConfigurationError`.
        ``workflow`` is the workflow's name, or a flow step's task name (``flow:step``)."""
        what = _label(workflow)
        if concurrency is not None:
            check_int(concurrency, f"{what}: concurrency", minimum=1, error=ConfigurationError)
        if key_concurrency is not None:
            check_int(
                key_concurrency, f"{what}: key_concurrency", minimum=1, error=ConfigurationError
            )
        if (concurrency_key is None) != (key_concurrency is None):
            raise ConfigurationError(f"{what}: concurrency_key and key_concurrency go together")
        for name, fn in (
            ("concurrency_key", concurrency_key),
            ("rate_limit_key", rate_limit_key),
            ("fifo_key", fifo_key),
        ):
            if fn is not None and not callable(fn):
                raise ConfigurationError(f"{what}: {name} must be a function of the input")
        if rate_limit_key is not None and rate_limit is None:
            raise ConfigurationError(f"{what}: rate_limit_key needs a rate_limit")
        count, period = (None, None) if rate_limit is None else parse_rate_limit(rate_limit)
        return cls(
            concurrency=concurrency,
            concurrency_key=concurrency_key,
            key_concurrency=key_concurrency,
            rate_limit=count,
            rate_period=period,
            rate_limit_key=rate_limit_key,
            fifo_key=fifo_key,
        )

    @property
    def declared(self) -> bool:
        """True if any limit is declared (runs then carry a lane)."""
        return (
            self.concurrency is not None
            or self.key_concurrency is not None
            or self.rate_limit is not None
            or self.fifo_key is not None
        )

    def record(self, workflow: str) -> WorkflowLimits:
        """The limits as the claim enforces them."""
        return WorkflowLimits(
            workflow=workflow,
            concurrency=self.concurrency,
            key_concurrency=self.key_concurrency,
            rate_limit=self.rate_limit,
            rate_period=self.rate_period,
            fifo=self.fifo_key is not None,
        )

    def keys(self, workflow: str, value: Any) -> RunKeys:
        """The keys of a start whose input (as JSON) is ``value``; a key function that
        fails or returns something other than a str or int is a `ValidationError`."""
        if not self.declared:
            return NO_KEYS
        concurrency = _key(workflow, "concurrency_key", self.concurrency_key, value)
        fifo = _key(workflow, "fifo_key", self.fifo_key, value)
        rate = None
        if self.rate_limit is not None:
            rate = _key(workflow, "rate_limit_key", self.rate_limit_key, value) or ""
        lane = next((k for k in (concurrency, fifo, rate) if k is not None), "")
        return RunKeys(lane=lane, fifo=fifo, rate=rate)


#: No limit declared.
NO_LIMITS = Limits()


def _label(workflow: str) -> str:
    """How messages name a workflow, or a flow step by its task name ``flow:step`` (a
    colon never occurs in a workflow name)."""
    flow, colon, step = workflow.partition(":")
    return f"step {step!r} of flow {flow!r}" if colon else f"workflow {workflow!r}"


def _key(workflow: str, what: str, fn: KeyFn | None, value: Any) -> str | None:
    if fn is None:
        return None
    label = _label(workflow)
    try:
        key = fn(value)
    except Exception as exc:
        raise ValidationError(
            f"{label}: {what} failed on the input: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise ValidationError(f"{label}: {what} must return a str or int, got {key!r:.80}")
    text = str(key)
    if not 1 <= len(text) <= MAX_KEY_LENGTH or "\x00" in text:
        raise ValidationError(
            f"{label}: {what} must be 1-{MAX_KEY_LENGTH} characters, got {text!r:.80}"
        )
    return text


def claim_limits(served: Iterable[tuple[str, Limits]]) -> tuple[WorkflowLimits, ...]:
    """The limits a worker serving these (workflow name, limits) pairs claims under, one
    per limited name (the last given: the highest version's)."""
    by_name = {name: limits.record(name) for name, limits in served if limits.declared}
    return tuple(by_name[name] for name in sorted(by_name))


def flow_control(
    new: NewRun,
    limits: Limits | None,
    debounce_key: str | None,
    debounce: Duration | None,
    options: dict[str, Any] | None = None,
) -> NewRun:
    """A start with its flow-control fields: the keys of its workflow's ``limits`` (the
    definition's; None when this process lacks the code: then the '' lane if the
    registry's ``options`` say it is limited) and its debounce. Bad options are a
    `ValidationError` before anything is stored."""
    if (debounce_key is None) != (debounce is None):
        raise ValidationError("debounce_key and debounce go together")
    fields: dict[str, Any] = {}
    if debounce_key is not None and debounce is not None:
        seconds = to_seconds(debounce, what="debounce")
        if seconds <= 0:
            raise ValidationError(f"debounce must be more than 0 seconds, got {debounce!r:.80}")
        if new.run_at is not None or new.delay:
            raise ValidationError("a debounced start takes no delay or run_at: debounce sets it")
        fields["debounce_key"] = check_key(debounce_key, "debounce_key")
        fields["debounce"] = seconds
        fields["delay"] = seconds
    if limits is not None and limits.declared:
        keys = limits.keys(new.workflow, json.loads(new.input_json))
        fields |= {"concurrency_key": keys.lane, "fifo_key": keys.fifo, "rate_key": keys.rate}
    elif limits is None and options and isinstance(options.get("limited"), dict):
        # Declared elsewhere (the registry says so) but its key functions are not
        # here: the run joins the workflow's '' lane, under its workflow-wide limits.
        fields |= {
            "concurrency_key": "",
            "rate_key": "" if options["limited"].get("rate") else None,
        }
    return replace(new, **fields) if fields else new
