from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[BaseHTTPRequestHandler], None]


def answer(status: int, body: object = None, headers: dict[str, str] | None = None) -> Answer:
    def write(h: BaseHTTPRequestHandler) -> None:
        data = json.dumps({} if body is None else body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/problem+json" if status >= 400 else "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    return write


def problem(status: int, headers: dict[str, str] | None = None) -> Answer:
    return answer(status, {"type": f"https://herald.dev/problems/{status}", "title": f"status {status}", "status": status}, headers)


def hang_up(h: BaseHTTPRequestHandler) -> None:
    """Drops the connection without an answer."""
    h.close_connection = True
    h.connection.shutdown(socket.SHUT_RDWR)


def delayed(seconds: float, then: Answer) -> Answer:
    def write(h: BaseHTTPRequestHandler) -> None:
        time.sleep(seconds)
        then(h)

    return write


def silence(h: BaseHTTPRequestHandler) -> None:
    """Answers nothing for longer than the tests' try timeout."""
    time.sleep(1.5)
    h.close_connection = True


ACCEPTED = {"requestId": "r", "notifications": [], "deliveries": [], "skipped": []}


class Script:
    """A local server answering each request with the next scripted answer."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.answers: list[Answer] = []
        self.lock = threading.Lock()
        script = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with script.lock:
                    script.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    nxt = script.answers.pop(0) if script.answers else answer(200, {})
                nxt(self)

            do_GET = do_POST = do_PUT = do_DELETE = handle_one

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self, *answers: Answer) -> None:
        with self.lock:
            self.seen = []
            self.answers = list(answers)


@pytest.fixture(scope="module")
def script() -> Iterator[Script]:
    s = Script()
    yield s
    s.server.shutdown()
    s.server.server_close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
