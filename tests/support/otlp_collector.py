"""A loopback OTLP/HTTP trace receiver: it takes ``POST /v1/traces`` as the OpenTelemetry
Protocol specifies it (opentelemetry.io/docs/specs/otlp/, "OTLP/HTTP": a binary protobuf
``ExportTraceServiceRequest``, answered 200 with an empty ``ExportTraceServiceResponse``) and
keeps the spans, decoded with the protocol's own generated classes (``opentelemetry-proto``).
Any other path answers 200 too and keeps its headers: a target for traced outbound calls."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    return (
        getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None
    )


@dataclass
class OtlpCollector:
    spans: list[ReceivedSpan] = field(default_factory=list)
    other_requests: list[dict[str, str]] = field(default_factory=list)

    def start(self) -> OtlpCollector:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/traces":
                    owner._keep(ExportTraceServiceRequest.FromString(body))
                else:
                    owner.other_requests.append({"path": self.path, **self.headers})
                self._answer()

            def do_GET(self) -> None:
                owner.other_requests.append({"path": self.path, **self.headers})
                self._answer()

            def _answer(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            span.name,
                            span.kind,
                            span.trace_id.hex(),
                            {a.key: _value(a.value) for a in span.attributes},
                            resource,
                        )
                    )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
