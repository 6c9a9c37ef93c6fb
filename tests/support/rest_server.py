"""A loopback HTTP server serving recorded JSON answers by path, for adapters that read a REST
API (YARN's ResourceManager, slurmrestd). It records every request (path, query, headers), so a
test can assert what was asked and with which credentials."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# A route answers (status, body): body a JSON-able object, or bytes sent as they are; for a 3xx
# status, a str body is the redirect's Location.
Answer = tuple[int, Any]
Route = Answer | Callable[[Mapping[str, list[str]], Mapping[str, str]], Answer]


@dataclass
class Request:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class RestServer:
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def answer(self, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Answer:
        self.requests.append(Request(path, query, headers))
        route = self.routes.get(path)
        if route is None:
            return 404, {"RemoteException": {"message": f"no route {path}"}}
        return route(query, headers) if callable(route) else route


@contextmanager
def serving(routes: Mapping[str, Route]) -> Iterator[RestServer]:
    server = RestServer(routes=dict(routes))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            status, body = server.answer(
                parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()}
            )
            redirect = 300 <= status < 400 and isinstance(body, str)
            data = (
                b"" if redirect else body if isinstance(body, bytes) else json.dumps(body).encode()
            )
            self.send_response(status)
            if redirect:
                self.send_header("Location", body)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
