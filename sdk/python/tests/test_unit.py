"""Unit tests of the retry, idempotency and signature logic, against a
local HTTP server (no herald needed)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import ACCEPTED, Script, answer, delayed, hang_up, problem, silence

from heraldhq import (
    AsyncHerald,
    Backoff,
    Herald,
    USER_AGENT,
    SendRequest,
    HeraldConnectionError,
    HeraldError,
    WebhookVerificationError,
    idempotency_key_for,
    parse_retry_after,
    sign_webhook,
    verify_webhook,
)

SEND: SendRequest = {"type": "invoice.paid", "recipients": ["u_8831"], "title": "Paid", "body": "Thanks"}


def client(s: Script, delays: list[float], **options: object) -> Herald:
    c = Herald(s.url, "k", max_attempts=3, **options)  # type: ignore[arg-type]
    c.sleep = delays.append
    return c


class TestTheRetryPolicy:
    def test_the_ceiling_doubles_from_the_minimum_and_is_capped_at_the_maximum(self) -> None:
        b = Backoff(0.1, 1.0)
        assert [b.ceiling(n) for n in (1, 2, 3, 4, 5)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])

    def test_each_delay_is_drawn_between_zero_and_the_ceiling(self) -> None:
        b = Backoff(0.1, 1.0)
        assert b.delay(2, random=lambda: 0.0) == 0.0
        assert b.delay(2, random=lambda: 0.5) == pytest.approx(0.2)
        assert b.delay(2, random=lambda: 0.999999) == pytest.approx(0.4, abs=1e-5)

    def test_no_delay_is_shorter_than_retry_after(self) -> None:
        assert Backoff(0.1, 1.0).delay(1, 5.0, random=lambda: 0.999) == 5.0

    def test_retry_after_is_read_as_seconds_or_an_http_date_and_nothing_else(self) -> None:
        now = datetime(2026, 12, 7, 10, 0, 0, tzinfo=timezone.utc)
        assert parse_retry_after("3", now) == 3.0
        assert parse_retry_after("Mon, 07 Dec 2026 10:00:05 GMT", now) == 5.0
        assert parse_retry_after("Mon, 07 Dec 2026 09:00:00 GMT", now) == 0.0
        assert parse_retry_after("soon", now) is None
        assert parse_retry_after("-1", now) is None
        assert parse_retry_after(None, now) is None


class TestACallAgainstALocalServer:
    @pytest.mark.parametrize("status", [429, 502, 503, 504])
    def test_a_transient_answer_is_retried_with_the_same_key_and_body(self, script: Script, status: int) -> None:
        script.reset(problem(status), answer(202, ACCEPTED))
        delays: list[float] = []
        res = client(script, delays).send(SEND)
        assert len(script.seen) == 2
        a, b = script.seen
        assert a.headers["idempotency-key"] == b.headers["idempotency-key"] == res["idempotencyKey"]
        assert a.body == b.body
        assert len(delays) == 1

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 409, 413, 415, 422, 500])
    def test_another_error_is_raised_at_once(self, script: Script, status: int) -> None:
        script.reset(problem(status), answer(202, ACCEPTED))
        with pytest.raises(HeraldError) as e:
            client(script, []).send(SEND)
        assert e.value.status == status
        assert e.value.problem["status"] == status
        assert e.value.attempts == 1
        assert len(script.seen) == 1

    def test_the_retry_waits_at_least_what_retry_after_asks(self, script: Script) -> None:
        script.reset(problem(503, {"Retry-After": "7"}), answer(202, ACCEPTED))
        delays: list[float] = []
        client(script, delays, max_backoff=0.01).send(SEND)
        assert delays == [7.0]

    def test_the_client_gives_up_after_max_attempts_with_the_last_answer(self, script: Script) -> None:
        script.reset(problem(503, {"Retry-After": "1"}), problem(503), problem(503, {"Retry-After": "2"}))
        with pytest.raises(HeraldError) as e:
            client(script, []).send(SEND)
        assert (e.value.status, e.value.retry_after, e.value.attempts) == (503, 2.0, 3)
        assert len({s.headers["idempotency-key"] for s in script.seen}) == 1

    def test_a_dropped_connection_is_retried_with_the_same_key(self, script: Script) -> None:
        script.reset(hang_up, answer(202, ACCEPTED))
        client(script, []).send(SEND)
        assert len(script.seen) == 2
        assert script.seen[0].headers["idempotency-key"] == script.seen[1].headers["idempotency-key"]

    def test_a_try_that_times_out_is_retried(self, script: Script) -> None:
        script.reset(silence, answer(202, ACCEPTED))
        client(script, [], attempt_timeout=0.3).send(SEND)
        assert len(script.seen) == 2

    def test_a_send_that_waits_gets_the_wait_on_top_of_its_try_bound(self, script: Script) -> None:
        script.reset(delayed(0.6, answer(202, ACCEPTED)))
        client(script, [], attempt_timeout=0.3).send(SEND, wait=1)
        assert len(script.seen) == 1

    def test_the_user_agent_is_sent(self, script: Script) -> None:
        script.reset(answer(200, {"webhooks": []}))
        client(script, []).list_webhooks()
        assert script.seen[0].headers["user-agent"] == USER_AGENT

    def test_a_server_that_never_answers_is_a_connection_error(self, script: Script) -> None:
        script.reset(hang_up, hang_up, hang_up)
        with pytest.raises(HeraldConnectionError) as e:
            client(script, []).send(SEND)
        assert e.value.attempts == 3
        assert len(script.seen) == 3

    def test_every_logical_send_gets_its_own_key_unless_the_caller_gives_one(self, script: Script) -> None:
        script.reset()
        c = client(script, [])
        c.send(SEND)
        c.send(SEND)
        c.send(SEND, idempotency_key="order-7")
        c.send({**SEND, "idempotencyKey": "order-8"})
        keys = [s.headers["idempotency-key"] for s in script.seen]
        assert keys[0] != keys[1]
        assert keys[2:] == ["order-7", "order-8"]

    def test_a_key_derived_id_gets_no_made_up_key(self) -> None:
        assert idempotency_key_for({**SEND, "key": {"invoice": "inv_2201"}}) is None
        assert idempotency_key_for({**SEND, "key": {"invoice": "inv_2201"}, "dedupeKey": "d"})
        assert idempotency_key_for({**SEND, "key": {"invoice": "inv_2201"}}, "given") == "given"

    def test_wait_is_sent_as_prefer_and_a_replay_is_read(self, script: Script) -> None:
        script.reset(answer(202, {**ACCEPTED, "requestId": "r0"}, {"Idempotency-Replayed": "true"}))
        res = client(script, []).send(SEND, wait=5)
        assert script.seen[0].headers["prefer"] == "wait=5"
        assert res["replayed"] is True
        assert res["requestId"] == "r0"

    def test_the_key_json_and_escaped_path_segments_are_sent(self, script: Script) -> None:
        script.reset(answer(200, {"userId": "a/b", "deviceId": "d 1", "platform": "ios", "enabled": True, "createdAt": 1, "updatedAt": 1}))
        client(script, []).register_device("a/b", "d 1", {"platform": "ios", "token": "t"})
        r = script.seen[0]
        assert (r.method, r.path) == ("PUT", "/v1/users/a%2Fb/devices/d%201")
        assert r.headers["authorization"] == "Bearer k"
        assert r.headers["content-type"] == "application/json"
        assert json.loads(r.body) == {"platform": "ios", "token": "t"}

    def test_the_feed_is_paged_with_next_cursor(self, script: Script) -> None:
        def item(i: str) -> dict[str, object]:
            return {"notificationId": i, "type": "t", "title": "x", "body": "y", "createdAt": 1, "read": False}

        script.reset(
            answer(200, {"items": [item("a"), item("b")], "unreadCount": 3, "nextCursor": "c1"}),
            answer(200, {"items": [item("c")], "unreadCount": 3}),
        )
        ids = [i["notificationId"] for i in client(script, []).feed_items("u 1", limit=2)]
        assert ids == ["a", "b", "c"]
        assert [s.path for s in script.seen] == ["/v1/recipients/u%201/feed?limit=2", "/v1/recipients/u%201/feed?limit=2&cursor=c1"]


class TestTheAsyncClient:
    @pytest.mark.anyio
    async def test_it_retries_a_503_with_the_same_key(self, script: Script) -> None:
        script.reset(problem(503), answer(202, ACCEPTED))
        delays: list[float] = []

        async def record(d: float) -> None:
            delays.append(d)

        async with AsyncHerald(script.url, "k", max_attempts=3) as c:
            c.sleep = record
            res = await c.send(SEND, wait=2)
        assert len(script.seen) == 2 and len(delays) == 1
        assert script.seen[0].headers["idempotency-key"] == script.seen[1].headers["idempotency-key"] == res["idempotencyKey"]
        assert script.seen[1].headers["prefer"] == "wait=2"

    @pytest.mark.anyio
    async def test_it_raises_a_422_at_once(self, script: Script) -> None:
        script.reset(problem(422), answer(202, ACCEPTED))
        async with AsyncHerald(script.url, "k", max_attempts=3) as c:
            with pytest.raises(HeraldError) as e:
                await c.send(SEND)
        assert e.value.status == 422 and len(script.seen) == 1

    @pytest.mark.anyio
    async def test_it_reports_a_server_that_never_answers(self, script: Script) -> None:
        script.reset(hang_up, hang_up)
        async with AsyncHerald(script.url, "k", max_attempts=2) as c:

            async def no_wait(_: float) -> None:
                pass

            c.sleep = no_wait
            with pytest.raises(HeraldConnectionError):
                await c.send(SEND)
        assert len(script.seen) == 2


def _vectors() -> dict:
    path = os.environ.get("HERALD_SDK_VECTORS") or Path(__file__).parents[2] / "testdata" / "webhook_vectors.json"
    return json.loads(Path(path).read_text(encoding="utf-8"))


VECTORS = _vectors()


@pytest.mark.parametrize("v", VECTORS["sign"], ids=[v["name"] for v in VECTORS["sign"]])
def test_signing_reproduces_the_shared_vector(v: dict) -> None:
    assert sign_webhook(v["secret"], v["id"], v["timestamp"], v["body"]) == v["signature"]


@pytest.mark.parametrize("c", VECTORS["verify"], ids=[c["name"] for c in VECTORS["verify"]])
def test_verification_agrees_with_the_shared_vector(c: dict) -> None:
    def run() -> str:
        return verify_webhook(c["secrets"], c["headers"], c["body"].encode(), now=c["now"], tolerance=VECTORS["toleranceSeconds"])

    if c["ok"]:
        assert run() == c["headers"]["webhook-id"]
    else:
        with pytest.raises(WebhookVerificationError):
            run()


def test_verification_reads_header_names_in_any_case() -> None:
    v = VECTORS["sign"][0]
    headers = [("Webhook-Id", v["id"]), ("Webhook-Timestamp", str(v["timestamp"])), ("Webhook-Signature", v["signature"])]
    assert verify_webhook(v["secret"], headers, v["body"], now=v["timestamp"]) == v["id"]
    assert verify_webhook([v["secret"]], dict(headers), v["body"].encode(), now=v["timestamp"]) == v["id"]
