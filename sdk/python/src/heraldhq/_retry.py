"""The retry policy: which answers are retried, and how long to wait."""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

#: Statuses worth trying again: 429 (too many requests), 503 (herald's
#: answer while Kafka or an index is not ready) and the gateway answers 502
#: and 504 a proxy gives when herald is unreachable. Never another 4xx.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


def is_retryable_status(status: int) -> bool:
    """Whether an answer with this status may succeed when tried again."""
    return status in RETRYABLE_STATUSES


@dataclass(frozen=True)
class Backoff:
    """Bounds of the wait between tries, in seconds."""

    min: float = 0.2
    max: float = 10.0

    def ceiling(self, n: int) -> float:
        """The longest wait before retry n (1-based): min(max, min·2ⁿ)."""
        lo = self.min if self.min > 0 else 0.2
        hi = max(lo, self.max if self.max > 0 else 10.0)
        return min(hi, lo * 2.0 ** max(0, n))

    def delay(
        self, n: int, retry_after: float | None = None, random: Callable[[], float] = _random.random
    ) -> float:
        """The wait before retry n: full jitter, uniform in [0, ceiling(n)],
        but never less than the server's Retry-After."""
        return max(random() * self.ceiling(n), retry_after or 0.0)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Parses a Retry-After header (delay-seconds or an HTTP date) into
    seconds from now; None when absent or malformed."""
    if value is None:
        return None
    v = value.strip()
    if v.isascii() and v.isdigit():
        return float(int(v))
    if not any(c.isalpha() for c in v):
        return None
    try:
        when = parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())
