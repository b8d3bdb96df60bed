"""Redaction: the values of configured keys masked wherever perdure shows data to
people (the REST API, the dashboard, the CLI, log lines); the stored value, and what
the Python API and the workers get, are untouched.

``App(redact=["password", "card.*"])``: each pattern is a dotted path of keys, each
key a glob (``*`` any one key, ``?`` any one character), compared without regard to
case. A pattern matches the end of a value's key path at any depth (list positions do
not count): ``password`` masks every ``password`` key, ``card.*`` every key directly
inside any ``card`` object, ``user.card`` the whole ``card`` of any ``user``. A masked
value reads ``"***"``; its key stays.

Text (error messages, tracebacks, log lines) is masked where it shows a configured key
the way code prints one: ``password=...``, ``"password": "..."``, ``'password': '...'``
(for patterns whose last key is a plain name; ``card.*`` masks ``card=...``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from .errors import ConfigurationError

__all__ = ["MASK", "Redaction"]

#: What a masked value reads.
MASK = "***"
_GLOB = re.compile(r"[*?\[]")
#: Record fields that hold user data.
_VALUE_FIELDS = ("input", "output", "data", "payload", "value")


class Redaction:
    """The keys to mask (see the module docstring); falsy when there are none."""

    def __init__(self, patterns: Iterable[str] | None = None, *, register: bool = True) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        self.patterns: tuple[str, ...] = tuple(patterns or ())
        self._paths: list[tuple[re.Pattern[str], ...]] = []
        names: list[str] = []
        for pattern in self.patterns:
            if (
                not isinstance(pattern, str)
                or not pattern
                or any(not part for part in pattern.split("."))
            ):
                raise ConfigurationError(
                    f"redact: {pattern!r} is not a dotted path of keys (e.g. 'card.number')"
                )
            parts = pattern.split(".")
            self._paths.append(tuple(re.compile(fnmatch.translate(p.lower()), re.S) for p in parts))
            # In text, "card.*" masks what "card=" shows: everything inside a card.
            literal = [p for p in parts[-2:] if not _GLOB.search(p)]
            if literal and (literal[-1] == parts[-1] or parts[-1] == "*"):
                names.append(re.escape(literal[-1]))
        self._text = _text_pattern(names)
        if self.patterns and register:  # perdure's log records are masked from now on
            _LOG_FILTER.add(self)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def __repr__(self) -> str:
        return f"Redaction({list(self.patterns)!r})"

    # ------------------------------------------------------------------ values

    def value(self, value: Any) -> Any:
        """``value`` with the configured keys' values masked (a copy; ``value`` is
        untouched)."""
        if not self._paths:
            return value
        return self._walk(value, ())

    def _walk(self, value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                inner = (*path, str(key).lower())
                out[key] = MASK if self._matches(inner) else self._walk(item, inner)
            return out
        if isinstance(value, list | tuple):
            return [self._walk(item, path) for item in value]
        if isinstance(value, str) and self._text is not None:
            return self.text(value)
        return value

    def _matches(self, path: Sequence[str]) -> bool:
        for parts in self._paths:
            if len(parts) <= len(path) and all(
                p.fullmatch(k) for p, k in zip(parts, path[len(path) - len(parts) :], strict=True)
            ):
                return True
        return False

    def text(self, text: str) -> str:
        """``text`` with ``key=value`` / ``"key": value`` shapes of configured keys masked."""
        if self._text is None:
            return text
        return self._text.sub(_masked, text)

    def record(self, record: Any) -> Any:
        """A record (`Run`, `Step`, `Event`, ...) with its data fields and error masked;
        a ``value`` event (``ctx.set``) is masked by the key it sets."""
        if not self._paths or not dataclasses.is_dataclass(record) or isinstance(record, type):
            return record
        changes: dict[str, Any] = {}
        for field in dataclasses.fields(record):
            current = getattr(record, field.name)
            if field.name == "data" and getattr(record, "type", None) == "value":
                changes["data"] = self._set_value(current)
            elif field.name == "output" and str(getattr(record, "name", "")).startswith("~set:"):
                changes["output"] = self._set_value(current)  # the journal row of ctx.set
            elif field.name in _VALUE_FIELDS or field.name == "error":
                changes[field.name] = self.value(current)
            elif field.name == "tasks":  # a flow step's tasks
                changes["tasks"] = type(current)(self.record(t) for t in current)
        return dataclasses.replace(record, **changes)

    def values(self, values: dict[str, Any]) -> dict[str, Any]:
        """The values a run set (``App.get_values``): keys are the value keys."""
        return dict(self.value(values)) if self._paths else values

    def _set_value(self, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("key"), str) and "value" in data:
            masked = self.value({data["key"]: data["value"]})
            return {**data, "value": masked[data["key"]]}
        return self.value(data)


def _text_pattern(names: list[str]) -> re.Pattern[str] | None:
    if not names:
        return None
    keys = "|".join(sorted(set(names), key=len, reverse=True))
    return re.compile(
        rf"""(?ix)
        (?P<q>["']?)\b(?P<key>{keys})\b(?P=q)      # the key, maybe quoted
        (?P<sep>\s*[:=]\s*)                        # : or =
        (?P<val>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&}}\])]+)
        """
    )


def _masked(match: re.Match[str]) -> str:
    value = match.group("val")
    quote = value[0] if value[:1] in ("'", '"') else ""
    q, key, sep = match.group("q"), match.group("key"), match.group("sep")
    return f"{q}{key}{q}{sep}{quote}{MASK}{quote}"


class _LogFilter(logging.Filter):
    """Masks the keys of every `Redaction` made in this process in perdure's log
    records: structured arguments (dicts, lists), the message text and tracebacks."""

    LOGGERS = (
        "perdure",
        "perdure.runs",
        "perdure.workflow",
        "perdure.engine",
        "perdure.worker",
        "perdure.server",
        "perdure.backends",
        "perdure.backends.postgres",
        "perdure.backends.sqlite",
    )

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._patterns: list[str] = []
        self._redaction: Redaction | None = None
        self._installed: set[str] = set()

    def add(self, redaction: Redaction) -> None:
        with self._lock:
            new = [p for p in redaction.patterns if p not in self._patterns]
            if new:
                self._patterns.extend(new)
                self._redaction = Redaction(self._patterns, register=False)
            # Every perdure logger: the named ones and any other module's (created at
            # import, so they exist by the time an App is made).
            known = [
                n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] == "perdure"
            ]
            for name in {*self.LOGGERS, *known} - self._installed:
                logging.getLogger(name).addFilter(self)
                self._installed.add(name)

    def filter(self, record: logging.LogRecord) -> bool:
        redaction = self._redaction
        if redaction is None:
            return True
        try:
            if isinstance(record.args, dict):
                record.args = redaction.value(record.args)
            elif record.args:
                record.args = tuple(
                    redaction.value(a) if isinstance(a, dict | list) else a for a in record.args
                )
            record.msg = redaction.text(record.getMessage())
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = redaction.text(
                    logging.Formatter().formatException(record.exc_info)
                )
        except Exception:  # a log line is never lost to its redaction
            return True
        return True


_LOG_FILTER = _LogFilter()
