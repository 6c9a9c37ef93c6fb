"""A small but real OpenID provider on a loopback port, for the single sign-on tests.

It serves what an IdP (Keycloak, Dex, Entra ID, Okta) serves to a relying party: the discovery
document, the JWKS of a fresh RSA key, ``/authorize`` (the authorization-code flow with PKCE;
the person who "logs in" is the one the test set with :meth:`OidcProvider.sign_in_as`), ``/token``
(client secret, redirect URI and code verifier checked; an RS256-signed ID token carrying the
nonce) and ``/userinfo`` (bearer access token). Nothing here is mocked inside gpuobs: its login
views talk to this server over HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "gpuobs"
CLIENT_SECRET = "s3cret-of-the-test-client"


@dataclass
class Grant:
    claims: dict[str, Any]
    redirect_uri: str
    nonce: str
    code_challenge: str


@dataclass
class OidcProvider:
    claims: dict[str, Any] = field(default_factory=dict)
    grants: dict[str, Grant] = field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    audience: str = CLIENT_ID

    def __post_init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = secrets.token_hex(4)
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider.handle(self, "GET")

            def do_POST(self) -> None:
                provider.handle(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def sign_in_as(self, username: str, groups: list[str], **claims: Any) -> None:
        """The person whom the next ``/authorize`` logs in."""
        self.claims = {
            "sub": f"sub-{username}",
            "preferred_username": username,
            "email": f"{username}@corp.example",
            "groups": groups,
            **claims,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the endpoints ---------------------------------------------------------------------------

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        routes = {
            ("GET", "/.well-known/openid-configuration"): self.discovery,
            ("GET", "/jwks"): self.jwks,
            ("GET", "/authorize"): self.authorize,
            ("POST", "/token"): self.token,
            ("GET", "/userinfo"): self.userinfo,
        }
        route = routes.get((method, url.path))
        if route is None:
            self.reply(request, 404, {"error": "not_found"})
            return
        if method == "POST":
            length = int(request.headers.get("Content-Length") or 0)
            query = request.rfile.read(length).decode()
        else:
            query = url.query
        params = {k: v[0] for k, v in parse_qs(query).items()}
        route(request, params)

    def reply(self, request: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def discovery(self, request: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        self.reply(
            request,
            200,
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "userinfo_endpoint": f"{self.issuer}/userinfo",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
            },
        )

    def jwks(self, request: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.reply(request, 200, {"keys": [{**public, "kid": self.kid, "alg": "RS256"}]})

    def authorize(self, request: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        if params.get("client_id") != CLIENT_ID or params.get("response_type") != "code":
            self.reply(request, 400, {"error": "invalid_request"})
            return
        code = secrets.token_urlsafe(16)
        self.grants[code] = Grant(
            dict(self.claims),
            params["redirect_uri"],
            params.get("nonce", ""),
            params.get("code_challenge", ""),
        )
        request.send_response(302)
        query = urlencode({"code": code, "state": params["state"]})
        request.send_header("Location", f"{params['redirect_uri']}?{query}")
        request.end_headers()

    def token(self, request: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        grant = self.grants.pop(params.get("code", ""), None)
        verifier = params.get("code_verifier", "").encode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
        if (
            grant is None
            or params.get("client_id") != CLIENT_ID
            or params.get("client_secret") != CLIENT_SECRET
            or params.get("redirect_uri") != grant.redirect_uri
            or challenge.decode() != grant.code_challenge
        ):
            self.reply(request, 400, {"error": "invalid_grant"})
            return
        now = int(time.time())
        id_token = jwt.encode(
            {
                **grant.claims,
                "iss": self.issuer,
                "aud": self.audience,
                "iat": now,
                "exp": now + 300,
                "nonce": grant.nonce,
            },
            self.key,
            algorithm="RS256",
            headers={"kid": self.kid},
        )
        access = secrets.token_urlsafe(16)
        self.tokens[access] = grant.claims
        self.reply(
            request,
            200,
            {"access_token": access, "token_type": "Bearer", "id_token": id_token},
        )

    def userinfo(self, request: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        claims = self.tokens.get(token)
        if claims is None:
            self.reply(request, 401, {"error": "invalid_token"})
            return
        self.reply(request, 200, claims)
