"""Tests against a real herald (sdk/test starts `herald dev` and sets
HERALD_SDK_TEST_URL); skipped without one."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest

from heraldhq import AsyncHerald, Herald, HeraldError, NotificationRecord, SendRequest, verify_webhook

URL = os.environ.get("HERALD_SDK_TEST_URL")
KEY = os.environ.get("HERALD_SDK_TEST_KEY", "herald-dev-key")
RUN = uuid.uuid4().hex[:8]

pytestmark = pytest.mark.skipif(not URL, reason="HERALD_SDK_TEST_URL is not set (sdk/test sets it)")

T = TypeVar("T")


def eventually(what: str, fn: Callable[[], T | None]) -> T:
    """Polls fn until it returns a value (not None); fails after a minute."""
    deadline = time.monotonic() + 60
    while True:
        v = fn()
        if v is not None:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after a minute")
        time.sleep(0.2)


def user(name: str) -> str:
    return f"py-{RUN}-{name}"


def note(**to: Any) -> SendRequest:
    return {"type": "sdk.test", "title": "Hello", "body": "from the Python SDK", **to}  # type: ignore[typeddict-item]


def found(fn: Callable[[], T]) -> T | None:
    """fn's answer, or None while herald answers 404 (its read model lags a send)."""
    try:
        return fn()
    except HeraldError as e:
        if e.status == 404:
            return None
        raise


def outcome_of(rec: NotificationRecord, channel: str) -> str | None:
    return next((e.get("status") for e in rec["timeline"] if e["kind"] == "outcome" and e.get("channel") == channel), None)


@pytest.fixture(scope="module")
def herald() -> Iterator[Herald]:
    with Herald(URL or "http://unused", KEY) as h:
        yield h


def test_a_device_is_registered_and_the_push_to_its_user_is_delivered(herald: Herald) -> None:
    u = user("alice")
    d = herald.register_device(u, "phone", {"platform": "ios", "token": "a1b2c3d4", "tags": ["beta"]})
    assert d["deviceId"] == "phone" and d["enabled"]
    res = herald.send(note(recipients=[u]), wait=10)
    assert [n["status"] for n in res["notifications"]] == ["accepted"]
    assert any(x["channel"] == "apns" and x["deviceId"] == "phone" for x in res["deliveries"]), res
    nid = res["notifications"][0]["id"]
    rec = eventually("delivered", lambda: (r if (r := found(lambda: herald.get_notification(nid))) and outcome_of(r, "apns") else None))
    assert outcome_of(rec, "apns") == "delivered"
    assert rec["idempotencyKey"] == res["idempotencyKey"]


def test_a_retry_with_the_same_key_is_answered_as_a_replay(herald: Herald) -> None:
    u = user("bob")
    first = herald.send(note(recipients=[u]), idempotency_key=f"order-{RUN}")
    again = herald.send(note(recipients=[u]), idempotency_key=f"order-{RUN}")
    assert again["replayed"] is True
    assert again["requestId"] == first["requestId"]
    assert [n["id"] for n in again["notifications"]] == [n["id"] for n in first["notifications"]]


def test_the_same_key_with_another_body_is_a_conflict_raised_at_once(herald: Herald) -> None:
    u = user("carol")
    herald.send(note(recipients=[u]), idempotency_key=f"conflict-{RUN}")
    with pytest.raises(HeraldError) as e:
        herald.send(note(recipients=[u], body="changed"), idempotency_key=f"conflict-{RUN}")
    assert (e.value.status, e.value.attempts) == (422, 1)
    assert e.value.problem.get("originalRequestId")


def test_each_recipient_gets_a_notification_of_its_own(herald: Herald) -> None:
    rs = [user("r1"), user("r2"), user("r3")]
    res = herald.send(note(recipients=rs))
    assert [n["recipient"] for n in res["notifications"]] == rs
    assert len({n["id"] for n in res["notifications"]}) == 3


def test_every_target_kind_reaches_its_users(herald: Herald) -> None:
    u, erin = user("dora"), user("erin")
    herald.register_device(u, "tablet", {"platform": "android", "token": "fcm-token-1", "tags": [f"tag-{RUN}"]})
    herald.set_segment(f"seg-{RUN}", [u, erin])
    # A tag, segment or all target is one notification addressed to the
    # group; the route stage fans it out to the members.
    for target, want in [
        ({"kind": "user", "userId": u}, [u]),
        ({"kind": "device", "deviceId": "tablet", "userId": u}, [u]),
        ({"kind": "tag", "tag": f"tag-{RUN}"}, [f"@tag:tag-{RUN}"]),
        ({"kind": "segment", "segment": f"seg-{RUN}"}, [f"@segment:seg-{RUN}"]),
        ({"kind": "all"}, ["@all"]),
    ]:
        res = herald.send(note(target=target))
        assert sorted(n["recipient"] for n in res["notifications"]) == sorted(want), target
    assert sorted(herald.get_segment(f"seg-{RUN}")["members"]) == sorted([u, erin])
    herald.delete_segment(f"seg-{RUN}")


def test_explain_says_a_used_dedupe_key_would_be_deduplicated(herald: Herald) -> None:
    body = note(recipients=[user("fay")], dedupeKey=f"dk-{RUN}", dedupeWindowMs=3_600_000)
    sent = herald.send(body, wait=10)
    ex = eventually("deduplicated", lambda: (e if (e := herald.explain(body))["wouldDeduplicate"] else None))
    assert ex["notifications"][0]["id"] == sent["notifications"][0]["id"]
    assert ex["notifications"][0]["idSource"] == "dedupe_key"


def test_devices_are_listed_read_and_deleted(herald: Herald) -> None:
    u = user("gus")
    herald.register_device(u, "a", {"platform": "ios", "token": "t-a"})
    herald.register_device(u, "b", {"platform": "android", "token": "t-b"})
    assert sorted(d["deviceId"] for d in herald.list_devices(u)) == ["a", "b"]
    assert herald.get_device(u, "b")["platform"] == "android"
    herald.delete_device(u, "a")
    with pytest.raises(HeraldError) as e:
        herald.get_device(u, "a")
    assert e.value.status == 404


def test_preferences_are_set_read_and_deleted(herald: Herald) -> None:
    u = user("hal")
    p = herald.set_preferences(
        u, {"channels": {"apns": False}, "optedOutTypes": ["marketing"], "quietHours": {"start": "22:00", "end": "07:00", "timeZone": "Europe/Paris"}}
    )
    assert p["channels"]["apns"] is False
    got = herald.get_preferences(u)
    assert got["optedOutTypes"] == ["marketing"]
    assert got.get("quietHours", {}).get("timeZone") == "Europe/Paris"
    herald.delete_preferences(u)
    with pytest.raises(HeraldError) as e:
        herald.get_preferences(u)
    assert e.value.status == 404


def test_the_feed_is_read_and_marked_read(herald: Herald) -> None:
    u = user("ivy")
    a = herald.send(note(recipients=[u], title="one"), wait=10)
    herald.send(note(recipients=[u], title="two"), wait=10)
    page = eventually("in the feed", lambda: (p if len((p := herald.get_feed(u))["items"]) == 2 else None))
    assert page["unreadCount"] == 2
    first = a["notifications"][0]["id"]
    herald.mark_feed_read(u, first)
    assert next(i for i in herald.get_feed(u)["items"] if i["notificationId"] == first)["read"] is True
    assert herald.mark_all_feed_read(u) == 1
    items = list(herald.feed_items(u, limit=1))
    assert len(items) == 2 and all(i["read"] for i in items)


def test_a_webhook_endpoint_receives_an_event_that_verifies(herald: Herald) -> None:
    got: list[tuple[dict[str, str], bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook_id = f"hook-py-{RUN}"
        hook = herald.set_webhook(hook_id, {"url": f"http://127.0.0.1:{server.server_address[1]}/hooks", "events": ["delivery.completed"]})
        secret = hook.get("secret")
        assert secret and secret.startswith("whsec_")
        assert hook_id in [w["id"] for w in herald.list_webhooks()]
        assert "secret" not in herald.get_webhook(hook_id)
        u = user("jan")
        herald.register_device(u, "phone", {"platform": "ios", "token": "jan-token"})
        nid = herald.send(note(recipients=[u]), wait=10)["notifications"][0]["id"]
        headers, body = eventually("posted", lambda: next((g for g in list(got) if nid.encode() in g[1]), None))
        assert verify_webhook(secret, headers, body) == headers["webhook-id"]
        with pytest.raises(ValueError):
            verify_webhook(secret, headers, body + b" ")
        herald.delete_webhook(hook_id)
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_that_breaks_a_rule_names_the_field_at_once(herald: Herald) -> None:
    with pytest.raises(HeraldError) as e:
        herald.send({"type": "sdk.test", "recipients": [user("kim")], "title": "x"})  # type: ignore[typeddict-item]
    assert (e.value.status, e.value.attempts) == (422, 1)
    assert "body" in e.value.field_errors


@pytest.mark.anyio
async def test_the_async_client_sends_replays_and_reads_a_notification() -> None:
    u = user("async")
    async with AsyncHerald(URL or "http://unused", KEY) as h:
        await h.register_device(u, "phone", {"platform": "android", "token": "async-token"})
        first = await h.send(note(recipients=[u]), idempotency_key=f"async-{RUN}", wait=10)
        again = await h.send(note(recipients=[u]), idempotency_key=f"async-{RUN}")
        assert again["replayed"] and again["requestId"] == first["requestId"]
        deadline = time.monotonic() + 60
        while True:
            try:
                rec = await h.get_notification(first["notifications"][0]["id"])
                break
            except HeraldError as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert rec["recipient"] == u
        assert [d["deviceId"] for d in await h.list_devices(u)] == ["phone"]
        items = [i async for i in h.feed_items(u)]
        assert isinstance(items, list)
