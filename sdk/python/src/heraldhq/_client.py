"""herald's HTTP API clients: Herald (sync) and AsyncHerald (asyncio), on httpx."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, TypeVar, cast
from urllib.parse import quote

import httpx

from ._errors import HeraldConnectionError, HeraldError
from ._retry import Backoff, is_retryable_status, parse_retry_after
from .api_types import (
    Device,
    DeviceList,
    DeviceRegistration,
    Explanation,
    FeedItem,
    FeedPage,
    FeedReadAll,
    NotificationRecord,
    Preferences,
    PreferencesUpdate,
    Problem,
    Segment,
    SendRequest,
    SendResult,
    Webhook,
    WebhookList,
    WebhookUpdate,
)

T = TypeVar("T")

#: The User-Agent sent unless user_agent replaces it.
USER_AGENT = "heraldhq-python/0.1.0"


class SendResponse(SendResult):
    """The answer to a send, and what the client knows of it."""

    #: True when herald answered with Idempotency-Replayed: true.
    replayed: bool
    #: The Idempotency-Key the call sent (None when it sent none).
    idempotencyKey: NotRequired[str | None]


def idempotency_key_for(request: SendRequest | Mapping[str, Any], given: str | None = None) -> str | None:
    """The Idempotency-Key a send carries: the caller's (the argument, else
    the body's idempotencyKey), else a fresh random one per call, except for
    a body with a key and no dedupeKey: its id is then the canonical id of
    (type, recipient, key), which herald deduplicates on, and an idempotency
    key would change it."""
    if given is not None:
        return given
    if request.get("idempotencyKey") is not None:
        return cast(str, request["idempotencyKey"])
    if request.get("key") is not None and request.get("dedupeKey") is None:
        return None
    return str(uuid.uuid4())


def _seg(s: str) -> str:
    return quote(s, safe="")


@dataclass
class _Call:
    """One call: the same method, path, body and headers on every try."""

    method: str
    path: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] | None = None
    #: A try's bound when longer than the client's (a send that waits).
    min_timeout: float = 0.0


@dataclass
class _Answer:
    status: int
    headers: httpx.Headers
    body: Any


class _Base:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_attempts: int = 4,
        attempt_timeout: float = 30.0,
        min_backoff: float = 0.2,
        max_backoff: float = 10.0,
        user_agent: str | None = None,
    ) -> None:
        if not base_url:
            raise ValueError("herald: base_url is required")
        if not api_key:
            raise ValueError("herald: api_key is required")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.max_attempts = max_attempts if max_attempts > 0 else 4
        self.attempt_timeout = attempt_timeout if attempt_timeout > 0 else 30.0
        self.backoff = Backoff(min_backoff, max_backoff)
        self._user_agent = user_agent

    def _request(self, c: _Call) -> tuple[str, dict[str, str], bytes | None]:
        headers = {
            **c.headers,
            "Authorization": f"Bearer {self._api_key}",
            "Accept": "application/json, application/problem+json",
        }
        headers["User-Agent"] = self._user_agent or USER_AGENT
        content = None
        if c.body is not None:
            content = json.dumps(c.body, ensure_ascii=False, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        return self.base_url + c.path, headers, content

    @staticmethod
    def _answer(c: _Call, resp: httpx.Response, attempt: int) -> _Answer:
        if resp.status_code >= 300:
            raise HeraldError(
                resp.status_code,
                _problem_of(resp),
                parse_retry_after(resp.headers.get("Retry-After")),
                attempt,
            )
        try:
            body = resp.json() if resp.content else None
        except ValueError as e:
            raise HeraldBadAnswer(f"herald: {c.method} {c.path}: the answer ({resp.status_code}) is not JSON") from e
        return _Answer(resp.status_code, resp.headers, body)

    def _retry_after(self, c: _Call, err: Exception, attempt: int) -> float | None:
        """Raises err (or the connection error it becomes) when the call
        must not be tried again; else returns the server's Retry-After."""
        if isinstance(err, HeraldError):
            if not is_retryable_status(err.status) or attempt >= self.max_attempts:
                raise err
            return err.retry_after
        if attempt >= self.max_attempts:
            raise HeraldConnectionError(
                f"herald: {c.method} {c.path}: no answer after {attempt} tries: {err!r}", attempt
            ) from err
        return None

    # The calls, shared by both clients: each returns a _Call.

    @staticmethod
    def _send(request: SendRequest, idempotency_key: str | None, wait: float | None) -> tuple[_Call, str | None]:
        key = idempotency_key_for(request, idempotency_key)
        headers = {}
        if key is not None:
            headers["Idempotency-Key"] = key
        if wait is not None:
            headers["Prefer"] = f"wait={max(0, int(wait))}"
        # A try waiting for decisions gets the wait and 10 s on top of its bound.
        min_timeout = 0.0 if wait is None else max(0, int(wait)) + 10.0
        return _Call("POST", "/v1/notifications", request, headers, min_timeout=min_timeout), key

    @staticmethod
    def _explain(request: SendRequest, idempotency_key: str | None) -> _Call:
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        return _Call("POST", "/v1/explain", request, headers)

    @staticmethod
    def _feed(recipient_id: str, limit: int | None, cursor: str | None) -> _Call:
        params = {}
        if limit is not None:
            params["limit"] = str(limit)
        if cursor is not None:
            params["cursor"] = cursor
        return _Call("GET", f"/v1/recipients/{_seg(recipient_id)}/feed", params=params or None)


class HeraldBadAnswer(Exception):
    """A 2xx answer the client cannot read: not retried."""


def _problem_of(resp: httpx.Response) -> Problem:
    try:
        p = resp.json()
        if isinstance(p, dict) and isinstance(p.get("title"), str):
            return cast(Problem, p)
    except ValueError:
        pass
    return {"type": "about:blank", "title": resp.reason_phrase or f"HTTP {resp.status_code}", "status": resp.status_code}


def _device_path(user_id: str, device_id: str) -> str:
    return f"/v1/users/{_seg(user_id)}/devices/{_seg(device_id)}"


def _prefs_path(user_id: str) -> str:
    return f"/v1/users/{_seg(user_id)}/preferences"


class Herald(_Base):
    """herald's HTTP API client. Every call is retried on network errors and
    timeouts, 429, 502, 503 and 504, with exponential backoff and full jitter
    (honouring Retry-After), never on another 4xx; a send carries the same
    Idempotency-Key on every try, so a retry is answered as the first try
    was and never makes a second notification.

    Use it as a context manager, or call close()."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_attempts: int = 4,
        attempt_timeout: float = 30.0,
        min_backoff: float = 0.2,
        max_backoff: float = 10.0,
        user_agent: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """base_url is the API's root (herald dev: http://127.0.0.1:8080),
        api_key its bearer key (herald dev: herald-dev-key). A call is tried
        up to max_attempts times, each bounded by attempt_timeout seconds
        (httpx's connect, read and write timeouts); the n-th retry waits a
        random time up to min(max_backoff, min_backoff·2ⁿ) seconds, never
        less than Retry-After. Pass http_client to share a pool (it is not
        closed by close())."""
        super().__init__(
            base_url,
            api_key,
            max_attempts=max_attempts,
            attempt_timeout=attempt_timeout,
            min_backoff=min_backoff,
            max_backoff=max_backoff,
            user_agent=user_agent,
        )
        self._own = http_client is None
        self._http = http_client or httpx.Client()
        #: The pause between tries; replaced in tests.
        self.sleep: Callable[[float], None] = time.sleep

    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self) -> Herald:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, c: _Call) -> _Answer:
        url, headers, content = self._request(c)
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._http.request(
                    c.method, url, headers=headers, content=content, params=c.params, timeout=max(self.attempt_timeout, c.min_timeout)
                )
                return self._answer(c, resp, attempt)
            except (HeraldError, httpx.TransportError) as e:
                retry_after = self._retry_after(c, e, attempt)
            self.sleep(self.backoff.delay(attempt, retry_after))

    def send(self, request: SendRequest, *, idempotency_key: str | None = None, wait: float | None = None) -> SendResponse:
        """Sends one logical notification: to recipients, one recipientId, or
        a target (user, device, tag, segment, all). Returns once herald has
        it durably (202), with each recipient's notification id and status.
        wait asks herald to wait up to that many seconds for the pipeline's
        decisions (Prefer: wait)."""
        c, key = self._send(request, idempotency_key, wait)
        a = self._call(c)
        return cast(SendResponse, {**a.body, "replayed": a.headers.get("Idempotency-Replayed") == "true", "idempotencyKey": key})

    def explain(self, request: SendRequest, *, idempotency_key: str | None = None) -> Explanation:
        """What herald would decide for this send now, changing nothing (the dedupe answer reads every earlier send)."""
        return cast(Explanation, self._call(self._explain(request, idempotency_key)).body)

    def get_notification(self, notification_id: str) -> NotificationRecord:
        """One notification: its first request, status and timeline so far."""
        return cast(NotificationRecord, self._call(_Call("GET", f"/v1/notifications/{_seg(notification_id)}")).body)

    def list_devices(self, user_id: str) -> list[Device]:
        return cast(DeviceList, self._call(_Call("GET", f"/v1/users/{_seg(user_id)}/devices")).body)["devices"]

    def get_device(self, user_id: str, device_id: str) -> Device:
        return cast(Device, self._call(_Call("GET", _device_path(user_id, device_id))).body)

    def register_device(self, user_id: str, device_id: str, registration: DeviceRegistration) -> Device:
        """Registers a device (ios, android: a token; web: a webPush
        subscription) or replaces it. A web device's answer carries its
        receiptToken, once."""
        return cast(Device, self._call(_Call("PUT", _device_path(user_id, device_id), registration)).body)

    def delete_device(self, user_id: str, device_id: str) -> None:
        self._call(_Call("DELETE", _device_path(user_id, device_id)))

    def get_preferences(self, user_id: str) -> Preferences:
        return cast(Preferences, self._call(_Call("GET", _prefs_path(user_id))).body)

    def set_preferences(self, user_id: str, preferences: PreferencesUpdate) -> Preferences:
        """Replaces a user's preferences: channels, opted-out types, quiet hours."""
        return cast(Preferences, self._call(_Call("PUT", _prefs_path(user_id), preferences)).body)

    def delete_preferences(self, user_id: str) -> None:
        self._call(_Call("DELETE", _prefs_path(user_id)))

    def get_segment(self, name: str) -> Segment:
        return cast(Segment, self._call(_Call("GET", f"/v1/segments/{_seg(name)}")).body)

    def set_segment(self, name: str, members: list[str]) -> Segment:
        """Replaces a segment's members (the recipients of target kind segment)."""
        return cast(Segment, self._call(_Call("PUT", f"/v1/segments/{_seg(name)}", {"members": members})).body)

    def delete_segment(self, name: str) -> None:
        self._call(_Call("DELETE", f"/v1/segments/{_seg(name)}"))

    def get_feed(self, recipient_id: str, *, limit: int | None = None, cursor: str | None = None) -> FeedPage:
        """One page of a recipient's in-app feed, newest first, with the unread count."""
        return cast(FeedPage, self._call(self._feed(recipient_id, limit, cursor)).body)

    def feed_items(self, recipient_id: str, *, limit: int | None = None) -> Iterator[FeedItem]:
        """Every item of a recipient's feed, newest first, page after page."""
        cursor = None
        while True:
            page = self.get_feed(recipient_id, limit=limit, cursor=cursor)
            yield from page["items"]
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def mark_feed_read(self, recipient_id: str, notification_id: str) -> None:
        """Marks one feed item read (idempotent)."""
        self._call(_Call("POST", f"/v1/recipients/{_seg(recipient_id)}/feed/{_seg(notification_id)}/read"))

    def mark_all_feed_read(self, recipient_id: str) -> int:
        """Marks every unread item of a recipient's feed read; returns how many."""
        return cast(FeedReadAll, self._call(_Call("POST", f"/v1/recipients/{_seg(recipient_id)}/feed/read-all")).body)["marked"]

    def list_webhooks(self) -> list[Webhook]:
        return cast(WebhookList, self._call(_Call("GET", "/v1/webhooks")).body)["webhooks"]

    def get_webhook(self, webhook_id: str) -> Webhook:
        return cast(Webhook, self._call(_Call("GET", f"/v1/webhooks/{_seg(webhook_id)}")).body)

    def set_webhook(self, webhook_id: str, update: WebhookUpdate) -> Webhook:
        """Registers an outbound webhook endpoint, or replaces it (idempotent).
        Only the answer creating it carries its secret (when herald made
        one): keep it to verify deliveries with verify_webhook."""
        return cast(Webhook, self._call(_Call("PUT", f"/v1/webhooks/{_seg(webhook_id)}", update)).body)

    def delete_webhook(self, webhook_id: str) -> None:
        self._call(_Call("DELETE", f"/v1/webhooks/{_seg(webhook_id)}"))


class AsyncHerald(_Base):
    """Herald for asyncio: the same calls, awaited, with the same retries.
    Use it as an async context manager, or await aclose()."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_attempts: int = 4,
        attempt_timeout: float = 30.0,
        min_backoff: float = 0.2,
        max_backoff: float = 10.0,
        user_agent: str | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """See Herald; http_client is an httpx.AsyncClient here."""
        super().__init__(
            base_url,
            api_key,
            max_attempts=max_attempts,
            attempt_timeout=attempt_timeout,
            min_backoff=min_backoff,
            max_backoff=max_backoff,
            user_agent=user_agent,
        )
        self._own = http_client is None
        self._http = http_client or httpx.AsyncClient()
        #: The pause between tries; replaced in tests.
        self.sleep: Callable[[float], Any] = asyncio.sleep

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncHerald:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, c: _Call) -> _Answer:
        url, headers, content = self._request(c)
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = await self._http.request(
                    c.method, url, headers=headers, content=content, params=c.params, timeout=max(self.attempt_timeout, c.min_timeout)
                )
                return self._answer(c, resp, attempt)
            except (HeraldError, httpx.TransportError) as e:
                retry_after = self._retry_after(c, e, attempt)
            await self.sleep(self.backoff.delay(attempt, retry_after))

    async def send(
        self, request: SendRequest, *, idempotency_key: str | None = None, wait: float | None = None
    ) -> SendResponse:
        """See Herald.send."""
        c, key = self._send(request, idempotency_key, wait)
        a = await self._call(c)
        return cast(SendResponse, {**a.body, "replayed": a.headers.get("Idempotency-Replayed") == "true", "idempotencyKey": key})

    async def explain(self, request: SendRequest, *, idempotency_key: str | None = None) -> Explanation:
        return cast(Explanation, (await self._call(self._explain(request, idempotency_key))).body)

    async def get_notification(self, notification_id: str) -> NotificationRecord:
        return cast(NotificationRecord, (await self._call(_Call("GET", f"/v1/notifications/{_seg(notification_id)}"))).body)

    async def list_devices(self, user_id: str) -> list[Device]:
        return cast(DeviceList, (await self._call(_Call("GET", f"/v1/users/{_seg(user_id)}/devices"))).body)["devices"]

    async def get_device(self, user_id: str, device_id: str) -> Device:
        return cast(Device, (await self._call(_Call("GET", _device_path(user_id, device_id)))).body)

    async def register_device(self, user_id: str, device_id: str, registration: DeviceRegistration) -> Device:
        return cast(Device, (await self._call(_Call("PUT", _device_path(user_id, device_id), registration))).body)

    async def delete_device(self, user_id: str, device_id: str) -> None:
        await self._call(_Call("DELETE", _device_path(user_id, device_id)))

    async def get_preferences(self, user_id: str) -> Preferences:
        return cast(Preferences, (await self._call(_Call("GET", _prefs_path(user_id)))).body)

    async def set_preferences(self, user_id: str, preferences: PreferencesUpdate) -> Preferences:
        return cast(Preferences, (await self._call(_Call("PUT", _prefs_path(user_id), preferences))).body)

    async def delete_preferences(self, user_id: str) -> None:
        await self._call(_Call("DELETE", _prefs_path(user_id)))

    async def get_segment(self, name: str) -> Segment:
        return cast(Segment, (await self._call(_Call("GET", f"/v1/segments/{_seg(name)}"))).body)

    async def set_segment(self, name: str, members: list[str]) -> Segment:
        return cast(Segment, (await self._call(_Call("PUT", f"/v1/segments/{_seg(name)}", {"members": members}))).body)

    async def delete_segment(self, name: str) -> None:
        await self._call(_Call("DELETE", f"/v1/segments/{_seg(name)}"))

    async def get_feed(self, recipient_id: str, *, limit: int | None = None, cursor: str | None = None) -> FeedPage:
        return cast(FeedPage, (await self._call(self._feed(recipient_id, limit, cursor))).body)

    async def feed_items(self, recipient_id: str, *, limit: int | None = None) -> AsyncIterator[FeedItem]:
        cursor = None
        while True:
            page = await self.get_feed(recipient_id, limit=limit, cursor=cursor)
            for item in page["items"]:
                yield item
            cursor = page.get("nextCursor")
            if not cursor:
                return

    async def mark_feed_read(self, recipient_id: str, notification_id: str) -> None:
        await self._call(_Call("POST", f"/v1/recipients/{_seg(recipient_id)}/feed/{_seg(notification_id)}/read"))

    async def mark_all_feed_read(self, recipient_id: str) -> int:
        a = await self._call(_Call("POST", f"/v1/recipients/{_seg(recipient_id)}/feed/read-all"))
        return cast(FeedReadAll, a.body)["marked"]

    async def list_webhooks(self) -> list[Webhook]:
        return cast(WebhookList, (await self._call(_Call("GET", "/v1/webhooks"))).body)["webhooks"]

    async def get_webhook(self, webhook_id: str) -> Webhook:
        return cast(Webhook, (await self._call(_Call("GET", f"/v1/webhooks/{_seg(webhook_id)}"))).body)

    async def set_webhook(self, webhook_id: str, update: WebhookUpdate) -> Webhook:
        return cast(Webhook, (await self._call(_Call("PUT", f"/v1/webhooks/{_seg(webhook_id)}", update))).body)

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._call(_Call("DELETE", f"/v1/webhooks/{_seg(webhook_id)}"))
