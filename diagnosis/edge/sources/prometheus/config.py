"""The Prometheus source's settings: a cluster's ``metrics_config``, declared once
(:data:`CONFIG`: every key with its type, default and meaning) and parsed by
:meth:`PrometheusConfig.parse` through that one declaration (every error names its key)::

    {"url": "https://prometheus.example.org",
     "matchers": {"cluster": "a100-east"},      # extra label matchers on every series
     "host_label": "auto",                      # or "Hostname" / "hostname"
     "timeout_s": 30, "retries": 2, "backoff_s": 0.5,
     "verify_tls": true, "ca_file": "prom-ca.pem",  # under GPUOBS_SECRETS_DIR
     "bearer_token_env": "GPUOBS_SECRET_PROM_TOKEN",  # or "bearer_token_file", or basic auth:
     "username": "gpuobs", "password_env": "GPUOBS_SECRET_PROM_PASSWORD",
     "headers": {"X-Scope-OrgID": "GPUOBS_SECRET_MIMIR_TENANT"},  # or "file:NAME"
     "client_cert_file": "prom-client.crt", "client_key_file": "prom-client.key",
     "window_s": 900, "scrape_interval_s": 15, "min_coverage": 0.95,
     "shard_min_gpus": 4096, "recording_rules": "auto"}

Secrets never sit in the config: it names the environment variable (``GPUOBS_SECRET_*``) or the
file (under the deployment's secrets directory) holding them (:mod:`diagnosis.edge.secrets`);
those keys are declared ``secret``. The URL carries no user or password. A custom header's
value (a tenant id for Mimir's ``X-Scope-OrgID``, a Thanos tenant, a gateway's API key) is such a
reference too, bound like the token to ``prometheus`` and the URL's host; so is the client key of
mutual TLS (docs/integrations.md "Prometheus-compatible back ends").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from diagnosis.core.vocabulary import DEFAULT_WINDOW_S
from diagnosis.edge import errors, secrets
from diagnosis.edge.config import REQUIRED, ConfigSpec, Setting
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.prometheus.promql import (
    ALLOWED_LABELS,
    LABEL_NAME,
    Matcher,
    Selection,
    matchers_from_mapping,
)

MIN_COVERAGE = 0.95
# RFC 9110 "token": what a header's name may be made of.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
# Headers the client sets itself (framing, auth, compression, the request id): not configurable.
RESERVED_HEADERS = frozenset(
    {
        "accept-encoding",
        "authorization",
        "connection",
        "content-length",
        "content-type",
        "cookie",
        "host",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-request-id",
    }
)


class PrometheusConfigError(errors.ConfigError, errors.CollectError):
    """Settings a collection cannot work with: permanent, and a :class:`CollectError` too (a
    cycle records a failed collection). Each of ``problems`` names its key
    (``metrics_config.timeout_s: expected a number``)."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.side = errors.SOURCE
        # past errors.ConfigError's "what: " prefix: each problem already names its key
        super(errors.ConfigError, self).__init__("; ".join(self.problems), permanent=True)


# -- the declared settings -----------------------------------------------------------------------


def _http_url(value: str) -> str:
    if not value:
        raise ValueError("required (e.g. http://prometheus:9090)")
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("expected an http(s) URL")
    if parsed.username is not None or parsed.password is not None or "@" in parsed.netloc:
        # never echoed: the value may hold a password
        raise ValueError(
            "must not carry a user or password; use username and password_env "
            "(or bearer_token_env) instead"
        )
    return value.rstrip("/")


def _label_values(value: dict) -> dict:
    if not all(isinstance(v, str) for v in value.values()):
        raise ValueError("expected an object of label -> value")
    return value


def _label_names(value: list) -> list:
    if not all(isinstance(n, str) and LABEL_NAME.fullmatch(n) for n in value):
        raise ValueError("expected a list of label names")
    return value


def _header_references(value: dict) -> dict:
    """Header name -> the secret reference of its value (``GPUOBS_SECRET_*`` or ``file:NAME``)."""
    problems = []
    for name, reference in value.items():
        if not HEADER_NAME.fullmatch(name):
            problems.append(f"{name[:64]!r} is not a header name")
        elif name.lower() in RESERVED_HEADERS:
            problems.append(f"{name} is set by gpuobs itself")
        elif not isinstance(reference, str):
            problems.append(f"{name}: expected a secret reference (GPUOBS_SECRET_* or file:NAME)")
        else:
            try:
                if reference.startswith("file:"):
                    secrets.check_file_reference(reference.removeprefix("file:"))
                else:
                    secrets.check_env_reference(reference)
            except secrets.SecretError as exc:
                problems.append(f"{name}: {exc}")
    if problems:
        raise ValueError("; ".join(problems))
    return value


def _optional(value: str) -> str | None:
    return value or None  # an empty string is no setting


def _secret_file(value: str) -> str | None:
    """A file under the secrets directory (checked as a reference by the spec) that exists."""
    if value:
        try:
            path = secrets.resolve_file(value)
        except secrets.SecretError as exc:
            raise ValueError(str(exc)) from None
        if not path.is_file():
            raise ValueError(f"no such file {value!r} in the secrets directory")
    return value or None


def _number(
    low: float | None = None, high: float | None = None, *, to: Callable[[Any], Any] | None = None
) -> Callable[[Any], Any]:
    """A check of a number key: not NaN, within ``[low, high]``, converted by ``to``."""

    def check(value: float) -> Any:
        if math.isnan(value):
            raise ValueError(f"expected a number, got {value!r}")
        below, above = low is not None and value < low, high is not None and value > high
        if below or above or (to is int and math.isinf(value)):
            raise ValueError(f"must lie in [{low}, {high}], got {value!r}")
        return value if to is None else to(value)

    return check


class _Settings(ConfigSpec):
    """The declared keys, plus the one check that reads two of them: a matcher's label must be
    on the allowlist or declared in ``extra_label_names``."""

    def parse(self, raw: Any) -> dict[str, Any]:
        values = super().parse(raw)
        problems = [
            f"matchers: label {name!r} is not on the allowlist; add it to extra_label_names"
            for name in values["matchers"]
            if name not in ALLOWED_LABELS and name not in values["extra_label_names"]
        ]
        if bool(values["client_cert_file"]) != bool(values["client_key_file"]):
            problems.append("client_cert_file and client_key_file: give both or neither")
        if problems:
            raise errors.ConfigError(problems, what=self.what, side=self.side)
        return values


CONFIG = _Settings(
    (
        Setting(
            "url",
            str,
            REQUIRED,
            "Prometheus (or Thanos, Mimir, VictoriaMetrics) base URL, http or https",
            check=_http_url,
        ),
        Setting(
            "matchers",
            dict,
            {},
            "label -> value matchers added to every series (the cluster's external labels)",
            check=_label_values,
        ),
        Setting(
            "extra_label_names",
            list,
            [],
            "label names beyond the allowlist that matchers may use",
            check=_label_names,
        ),
        Setting(
            "host_label",
            str,
            "auto",
            "dcgm-exporter's host label; auto tries both spellings",
            choices=("auto", *dcgm.HOST_LABELS),
        ),
        Setting("timeout_s", float, 30.0, "per query", check=_number(0.1, 600, to=float)),
        Setting(
            "retries", float, 2, "per query, transient failures only", check=_number(0, 10, to=int)
        ),
        Setting(
            "backoff_s",
            float,
            0.5,
            "first pause between retries (doubling)",
            check=_number(0, 60, to=float),
        ),
        Setting("verify_tls", bool, True, "check the server's certificate"),
        Setting(
            "ca_file",
            str,
            None,
            "CA bundle for the server's certificate, a file under the secrets directory",
            check=_secret_file,
            reference="file",
        ),
        Setting(
            "bearer_token_env",
            str,
            None,
            "environment variable (GPUOBS_SECRET_*) holding a bearer token",
            secret=True,
            check=_optional,
        ),
        Setting(
            "bearer_token_file",
            str,
            None,
            "file under the secrets directory holding a bearer token",
            secret=True,
            check=_optional,
            reference="file",
        ),
        Setting("username", str, None, "basic-auth user", check=_optional),
        Setting(
            "password_env",
            str,
            None,
            "environment variable (GPUOBS_SECRET_*) holding the basic-auth password",
            secret=True,
            check=_optional,
        ),
        Setting(
            "headers",
            dict,
            {},
            "header name -> secret reference (GPUOBS_SECRET_* or file:NAME) of its value, sent "
            "with every query (X-Scope-OrgID for Mimir, THANOS-TENANT, a gateway's key)",
            check=_header_references,
        ),
        Setting(
            "client_cert_file",
            str,
            None,
            "client certificate (PEM) for mutual TLS, a file under the secrets directory",
            check=_secret_file,
            reference="file",
        ),
        Setting(
            "client_key_file",
            str,
            None,
            "its private key (PEM, unencrypted), a file under the secrets directory bound to "
            "prometheus and this host",
            secret=True,
            check=_secret_file,
            reference="file",
        ),
        Setting(
            "window_s",
            float,
            DEFAULT_WINDOW_S,
            "the window the statistics cover, seconds",
            check=_number(60, to=int),
        ),
        Setting(
            "scrape_interval_s",
            float,
            None,
            "dcgm-exporter's scrape interval (default: estimated from the samples)",
            check=_number(0.1),
        ),
        Setting(
            "max_data_age_s",
            float,
            None,
            "newest sample older than this: not judged (default: two scrape intervals)",
            check=_number(1),
        ),
        Setting(
            "min_coverage",
            float,
            MIN_COVERAGE,
            "share of the GPUs that must answer for the metric rules to be judged",
            check=_number(0, 1, to=float),
        ),
        Setting(
            "parallel_queries", float, 4, "queries in flight at once", check=_number(1, 16, to=int)
        ),
        Setting(
            "deadline_s",
            float,
            120.0,
            "the whole collection, seconds",
            check=_number(1, 3600, to=float),
        ),
        Setting(
            "shard_min_gpus",
            float,
            4096,
            "a cluster this large is collected per node pool, as shards",
            check=_number(1, to=int),
        ),
        Setting(
            "max_series_per_gpu",
            float,
            32,
            "series one GPU may have in one scrape (one per pod sharing it, and its own); more "
            "is a degraded collection (a cardinality bomb), read as copies, never summed",
            check=_number(1, 10000, to=int),
        ),
        Setting(
            "recording_rules",
            str,
            "auto",
            "read the recording rules' series (manage.py recording_rules) where they are fresh, "
            "else the raw series per family (auto); never (off); or fail the collection when "
            "any family's are missing or stale (require)",
            choices=("auto", "off", "require"),
        ),
        Setting(
            "recording_rules_max_age_s",
            float,
            180.0,
            "recorded series older than this (their rule group's last evaluation) are stale: "
            "that family is read raw",
            check=_number(1, 3600, to=float),
        ),
        Setting(
            "nvlink_total_unit_Bps",
            float,
            1e6,
            "unit of DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL in bytes/s",
            check=_number(0, to=float),
        ),
    ),
    what="metrics_config",
)


@dataclass(frozen=True)
class PrometheusConfig:
    """One cluster's parsed settings (the keys and defaults are :data:`CONFIG`'s)."""

    url: str
    matchers: tuple[tuple[str, str], ...]
    extra_label_names: frozenset[str]
    host_label: str
    timeout_s: float
    retries: int
    backoff_s: float
    verify_tls: bool
    ca_file: str | None
    bearer_token_env: str | None
    bearer_token_file: str | None
    username: str | None
    password_env: str | None
    headers: tuple[tuple[str, str], ...]
    client_cert_file: str | None
    client_key_file: str | None
    window_s: int
    scrape_interval_s: float | None
    max_data_age_s: float | None
    min_coverage: float
    parallel_queries: int
    deadline_s: float
    shard_min_gpus: int
    max_series_per_gpu: int
    recording_rules: str
    recording_rules_max_age_s: float
    nvlink_total_unit_Bps: float

    @classmethod
    def parse(
        cls, raw: Mapping[str, Any] | None, prefix: str = "metrics_config"
    ) -> PrometheusConfig:
        """The typed settings, or :class:`PrometheusConfigError` naming every bad key
        (``<prefix>.<key>: ...``)."""
        try:
            values = CONFIG.parse(raw)
        except errors.ConfigError as exc:
            joint = "." if raw is None or isinstance(raw, Mapping) else ": "
            problems = [f"{prefix}{joint}{problem}" for problem in exc.problems]
            raise PrometheusConfigError(problems) from None
        values["matchers"] = tuple(sorted(values["matchers"].items()))
        values["extra_label_names"] = frozenset(values["extra_label_names"])
        values["headers"] = tuple(sorted(values["headers"].items()))
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (what a shard task carries); no secrets are in it."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name in ("matchers", "headers"):
                value = dict(value)
            elif name == "extra_label_names":
                value = sorted(value)
            if value is not None:
                out[name] = value
        return out

    def auth(self) -> tuple[dict[str, str], tuple[str, str] | None]:
        """Headers and basic-auth pair, read from the environment or the token file now."""
        headers: dict[str, str] = {}
        token = None
        use = secrets.Use("prometheus", self.url)  # bound to this integration and host only
        try:
            if self.bearer_token_env:
                token = secrets.read_env(self.bearer_token_env, use)
            elif self.bearer_token_file:
                token = secrets.read_file(self.bearer_token_file, use)
            if token:
                headers["Authorization"] = f"Bearer {token}"
                return headers, None
            if self.username:
                password = secrets.read_env(self.password_env, use) if self.password_env else ""
                return headers, (self.username, password)
        except secrets.SecretError as exc:
            key = (
                "bearer_token_env"
                if self.bearer_token_env
                else "bearer_token_file"
                if self.bearer_token_file
                else "password_env"
            )
            raise PrometheusConfigError(f"metrics_config.{key}: {exc}") from None
        return headers, None

    def custom_headers(self) -> dict[str, str]:
        """The declared headers with their values, read now from the references bound to
        ``prometheus`` and this URL's host (:class:`PrometheusConfigError` naming the header)."""
        use = secrets.Use("prometheus", self.url)
        values: dict[str, str] = {}
        for name, reference in self.headers:
            try:
                if reference.startswith("file:"):
                    value = secrets.read_file(reference.removeprefix("file:"), use)
                else:
                    value = secrets.read_env(reference, use)
            except secrets.SecretError as exc:
                raise PrometheusConfigError(f"metrics_config.headers.{name}: {exc}") from None
            if not value or any(c in value for c in "\r\n\0"):
                raise PrometheusConfigError(
                    f"metrics_config.headers.{name}: {reference} holds no single-line value"
                )
            values[name] = value
        return values

    def client_cert(self) -> tuple[str, str] | None:
        """The real paths of the client certificate and key for ``requests`` (the key's
        reference bound to ``prometheus`` and this host), or None without mutual TLS."""
        if not (self.client_cert_file and self.client_key_file):
            return None
        use = secrets.Use("prometheus", self.url)
        try:
            cert = secrets.resolve_file(self.client_cert_file)
        except secrets.SecretError as exc:
            raise PrometheusConfigError(f"metrics_config.client_cert_file: {exc}") from None
        try:
            key = secrets.resolve_file(self.client_key_file)
            secrets.check_use(f"file:{self.client_key_file}", use)
        except secrets.SecretError as exc:
            raise PrometheusConfigError(f"metrics_config.client_key_file: {exc}") from None
        return str(cert), str(key)

    def ca_bundle(self) -> str | bool:
        """What ``requests`` verifies the server with: the CA file's real path, or the flag."""
        if self.ca_file:
            try:
                return str(secrets.resolve_file(self.ca_file))
            except secrets.SecretError as exc:
                raise PrometheusConfigError(f"metrics_config.ca_file: {exc}") from None
        return self.verify_tls

    def selection(self, hosts: Sequence[str] | None = None) -> Selection:
        """The series of this cluster (and, for a shard, of these hosts only)."""
        fixed = matchers_from_mapping(dict(self.matchers))
        if not hosts:
            return Selection(fixed, ((),), self.extra_label_names)
        labels = dcgm.HOST_LABELS if self.host_label == "auto" else (self.host_label,)
        alternatives = tuple((Matcher.any_of(label, hosts),) for label in labels)
        return Selection(fixed, alternatives, self.extra_label_names)

    def node_selection(self, hosts: Sequence[str] | None = None) -> Selection:
        fixed = matchers_from_mapping(dict(self.matchers))
        alternatives = ((Matcher.any_of("nodename", hosts),),) if hosts else ((),)
        return Selection(fixed, alternatives, self.extra_label_names)
