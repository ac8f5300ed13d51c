"""The errors a call raises."""

from __future__ import annotations

from .api_types import Problem


class HeraldError(Exception):
    """An answer other than 2xx: its status and problem details (RFC 9457)."""

    def __init__(self, status: int, problem: Problem, retry_after: float | None, attempts: int) -> None:
        detail = problem.get("detail")
        title = problem.get("title", "")
        super().__init__(f"herald: {status} {title}: {detail}" if detail else f"herald: {status} {title}")
        #: The HTTP status.
        self.status = status
        #: The problem body; a minimal one when the body was not a problem.
        self.problem = problem
        #: The server's Retry-After (seconds), when it sent one.
        self.retry_after = retry_after
        #: How many tries the call made.
        self.attempts = attempts

    @property
    def retryable(self) -> bool:
        """Whether retrying the same call may succeed (the client already did)."""
        return self.status in (429, 502, 503, 504)

    @property
    def field_errors(self) -> dict[str, str]:
        """The offending fields of a 400 or 422, by name."""
        return {e["field"]: e["message"] for e in self.problem.get("errors", [])}


class HeraldConnectionError(Exception):
    """The call never got an answer: every try failed in the network
    (refused, reset, timed out). __cause__ is the last try's error."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts
