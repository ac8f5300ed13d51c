"""herald's Python SDK: the HTTP API clients (Herald, sync; AsyncHerald,
asyncio), their errors, the retry policy, Standard Webhooks verification for
receivers, and the wire types generated from api/openapi.json
(heraldhq.api_types)."""

from ._client import USER_AGENT, AsyncHerald, Herald, HeraldBadAnswer, SendResponse, idempotency_key_for
from ._errors import HeraldConnectionError, HeraldError
from ._retry import RETRYABLE_STATUSES, Backoff, is_retryable_status, parse_retry_after
from .api_types import *  # noqa: F403
from .api_types import __all__ as _types
from .webhooks import SECRET_PREFIX, WebhookVerificationError, secret_key, sign_webhook, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "AsyncHerald",
    "Backoff",
    "Herald",
    "HeraldBadAnswer",
    "HeraldConnectionError",
    "HeraldError",
    "RETRYABLE_STATUSES",
    "SECRET_PREFIX",
    "SendResponse",
    "USER_AGENT",
    "WebhookVerificationError",
    "idempotency_key_for",
    "is_retryable_status",
    "parse_retry_after",
    "secret_key",
    "sign_webhook",
    "verify_webhook",
    *_types,
]
