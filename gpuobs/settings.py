"""Settings of gpuobs, read from the environment (one file; every variable is in README.md).

Two modes follow from the environment:

- **embedded** (nothing set): SQLite in ``var/gpuobs.sqlite3``, Celery tasks run in-process,
  ``DEBUG`` on, a fixed development secret key. For ``make demo`` on a laptop.
- **production** (``DJANGO_DEBUG=0``): ``DJANGO_SECRET_KEY`` and ``DJANGO_ALLOWED_HOSTS`` are
  required, HTTPS-only cookies, HSTS and the SSL redirect are on unless turned off explicitly;
  ``DATABASE_URL`` points at PostgreSQL and ``REDIS_URL`` at Redis (broker, results, cycle locks).
"""

import ipaddress
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from diagnosis.core.cost import PriceError, parse_price_text
from gpuobs import logs as gpuobs_logs
from gpuobs import redis_sentinel

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_bool(name: str, default: bool) -> bool:
    """Read a yes/no variable; anything other than 1/0, true/false, yes/no, on/off is an error."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be 1 or 0 (true/false, yes/no, on/off), not {raw!r}")


def env_int(name: str, default: int) -> int:
    """Read an integer variable, naming the variable when it is not one."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None


def env_list(name: str) -> list[str]:
    """Read a comma-separated list; blanks around items and empty items are dropped."""
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


# --- core ----------------------------------------------------------------------------------------

DEBUG = env_bool("DJANGO_DEBUG", default=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG=0 (e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(64))')"
        )
    # Only with DEBUG on: check --deploy flags it; production refuses to start without a key.
    SECRET_KEY = "django-insecure-gpuobs-embedded-mode-only-never-use-in-production"  # noqa: S105

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS")
if not ALLOWED_HOSTS and not DEBUG:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_DEBUG=0")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "axes",  # login lockout (diagnosis/throttling.py)
    "drf_spectacular",  # the API's OpenAPI schema (diagnosis/api/schema.py)
    "diagnosis",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # an API error is JSON in every state, the database away included (diagnosis/middleware.py)
    "diagnosis.middleware.ApiErrorMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # the language: set_language's cookie, else Accept-Language, else LANGUAGE_CODE (docs/ui.md)
    "django.middleware.locale.LocaleMiddleware",
    # the reader's time zone: their cookie's, else UTC (docs/ui.md "Clocks and time zones")
    "diagnosis.pages.support.time_zone.ReaderTimeZoneMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # %00 and deep or huge JSON refused before any view; no-store on authenticated answers
    "diagnosis.middleware.RequestHygieneMiddleware",
    # Every page needs a login unless its view is marked @login_not_required (login, /healthz).
    # DRF views opt out of this redirect and answer 401/403 through their own permissions.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # last, as django-axes asks: turns a locked-out login into a 429
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy (django-csp): scripts only from gpuobs itself (plotly is vendored and
# every chart's data is a JSON <script type="application/json">, not code); no frames, no
# plugins. Styles may be inline: plotly sets them on the elements it draws.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Login lockout (django-axes, diagnosis/throttling.py): failures per user name and address.
AUTHENTICATION_BACKENDS = [
    "diagnosis.throttling.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("GPUOBS_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = env_int("GPUOBS_LOGIN_COOLOFF_MINUTES", 15) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# The client's address behind the reverse proxies named here (addresses or networks,
# comma-separated; unset: none is trusted and X-Forwarded-For is ignored). Used by the lockout
# and the API throttles alike (diagnosis/throttling.py, client_address).
try:
    GPUOBS_TRUSTED_PROXIES = [
        str(ipaddress.ip_network(item.strip(), strict=False))
        for item in os.environ.get("GPUOBS_TRUSTED_PROXIES", "").split(",")
        if item.strip()
    ]
except ValueError as error:
    raise ImproperlyConfigured(f"GPUOBS_TRUSTED_PROXIES: {error}") from None
AXES_CLIENT_IP_CALLABLE = "diagnosis.throttling.client_address"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no start-up banner on stdout; failures and lockouts are still logged
AXES_SENSITIVE_PARAMETERS: list[str] = []  # the log names the user and address of a failure

ROOT_URLCONF = "gpuobs.urls"
WSGI_APPLICATION = "gpuobs.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.i18n",
                # the menu of the user's roles (docs/ui.md)
                "diagnosis.pages.support.navigation.menu",
            ],
        },
    },
]

# --- database ------------------------------------------------------------------------------------

EMBEDDED_SQLITE_PATH = BASE_DIR / "var" / "gpuobs.sqlite3"

if os.environ.get("DATABASE_URL"):
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ["DATABASE_URL"],
            conn_max_age=env_int("DJANGO_DB_CONN_MAX_AGE", 60),
            conn_health_checks=True,
        )
    }
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # test databases are copied from template0, which nobody can connect to: a session on
        # template1 (psql, another CREATE DATABASE) would fail CREATE DATABASE ... TEMPLATE
        # template1 with "being accessed by other users"
        DATABASES["default"]["TEST"] = {"TEMPLATE": "template0"}
    # A web request's statement is cancelled after this many seconds (0: never), less than
    # gunicorn's own 30 s worker timeout (docs/operations.md, "Inbound webhooks"), so a request
    # stuck in the database ends in an answer, not in a killed worker. Web processes only
    # (gpuobs/wsgi.py): cycles and migrations keep their own limits.
    GPUOBS_WEB_STATEMENT_TIMEOUT_S = env_int("GPUOBS_WEB_STATEMENT_TIMEOUT_S", 20)
    if os.environ.get("GPUOBS_WEB_PROCESS") == "1" and GPUOBS_WEB_STATEMENT_TIMEOUT_S > 0:
        DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
            f"-c statement_timeout={GPUOBS_WEB_STATEMENT_TIMEOUT_S * 1000}"
        )
else:
    EMBEDDED_SQLITE_PATH.parent.mkdir(exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": EMBEDDED_SQLITE_PATH,
            "OPTIONS": {
                # The embedded server and the demo's cycles write from more than one thread.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- auth ----------------------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "landing"  # per role: diagnosis/pages/support/navigation.py
LOGOUT_REDIRECT_URL = "/accounts/login/"

REST_FRAMEWORK = {
    # Token first: an anonymous caller gets 401 with `WWW-Authenticate: Token`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "diagnosis.throttling.ThrottleBeforeAuthentication",  # authenticates nobody: throttles
        "diagnosis.api.auth.HashedTokenAuthentication",  # hashed, expiring (models/tokens.py)
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "diagnosis.api.schema.ApiSchema",
    # diagnosis/throttling.py: a 429 with Retry-After beyond these rates, counted in
    # CACHES["throttle"]; callers without credentials and failed credentials are counted before
    # authentication (ThrottleBeforeAuthentication)
    "DEFAULT_THROTTLE_CLASSES": ["diagnosis.throttling.UserThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "anon": os.environ.get("GPUOBS_API_RATE_ANON", "60/min"),
        "user": os.environ.get("GPUOBS_API_RATE_USER", "1200/min"),
        "failed_credentials": os.environ.get("GPUOBS_API_RATE_FAILED", "20/min"),
        "sender": os.environ.get("GPUOBS_API_RATE_SENDER", "600/min"),
    },
    "EXCEPTION_HANDLER": "diagnosis.api.errors.api_exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "gpuobs API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "PREPROCESSING_HOOKS": ["diagnosis.api.schema.versioned_only"],
    # the credentials a client may send (ThrottleBeforeAuthentication checks none)
    "AUTHENTICATION_WHITELIST": [
        "diagnosis.api.auth.HashedTokenAuthentication",
        "diagnosis.api.auth.BearerTokenAuthentication",
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "diagnosis.choices.JobState",
        "FindingStateEnum": "diagnosis.choices.FindingState",
        "RecommendationStateEnum": "diagnosis.choices.RecommendationState",
        "IncidentStateEnum": "diagnosis.choices.IncidentState",
        "NodeStateEnum": "diagnosis.choices.NodeState",
        "AnnotationKindEnum": "diagnosis.api.annotations.ANNOTATION_KINDS",
        "RecommendationKindEnum": "diagnosis.choices.RecommendationKind",
        "PolicyKindEnum": "diagnosis.models.autopilot.PolicyKind",
        "PolicyStateEnum": "diagnosis.models.autopilot.PolicyState",
        "PolicyModeEnum": "diagnosis.models.autopilot.PolicyMode",
        "InboundStateEnum": "diagnosis.models.inbound.InboundState",
    },
}

# --- transport security (secure by default whenever DEBUG is off) ------------------------------

SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
# Plain HTTP inside the cluster: probes and health checks, and Prometheus's scrape of /metrics
# (a token or basic auth as over HTTPS; docs/integrations.md, "/metrics"). Pages still redirect.
SECURE_REDIRECT_EXEMPT = [r"^healthz\Z", r"^livez\Z", r"^readyz\Z", r"^metrics\Z"]
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool(
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG
)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=not DEBUG)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Behind a TLS-terminating reverse proxy that sets X-Forwarded-Proto, set
# DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https (and nothing else may set it).
if os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER"):
    _header, _, _value = os.environ["DJANGO_SECURE_PROXY_SSL_HEADER"].partition(",")
    if not _header.strip() or not _value.strip():
        raise ImproperlyConfigured(
            "DJANGO_SECURE_PROXY_SSL_HEADER must look like HTTP_X_FORWARDED_PROTO,https"
        )
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip())

# --- i18n, static files --------------------------------------------------------------------------

LANGUAGE_CODE = "en"
# English and Simplified Chinese (locale/zh_Hans/LC_MESSAGES/django.po, compiled .mo committed
# beside it; docs/ui.md "Language"). Dates and numbers follow the language's formats.
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # vendor/plotly.min.js: the plotly.js of the installed plotly package (no CDN, no copy).
    "diagnosis.charts.plotly_static.PlotlyJsFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        # Hashed, compressed files need `collectstatic`; the embedded mode serves them as they are.
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# Embedded mode: whitenoise serves straight from static/ (no collectstatic, no staticfiles/).
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# --- Redis, Celery, diagnosis cycles -------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL") or None
# REDIS_URL=sentinel://HOST:PORT;sentinel://HOST:PORT/DB: Redis behind Sentinel, this master
# (gpuobs/redis_sentinel.py; docs/operations.md, "Redis")
GPUOBS_REDIS_SENTINEL_MASTER = os.environ.get("GPUOBS_REDIS_SENTINEL_MASTER", "mymaster")
_SENTINEL = redis_sentinel.is_sentinel(REDIS_URL)
# a cache's LOCATION: a list, since Django splits a string at ";" into several servers
_CACHE_LOCATION = [REDIS_URL] if _SENTINEL else REDIS_URL
_CACHE_SENTINEL = (
    {
        "pool_class": "gpuobs.redis_sentinel.SentinelPool",
        "master_name": GPUOBS_REDIS_SENTINEL_MASTER,
    }
    if _SENTINEL
    else {}
)

# Django's default cache stays each process's own memory. The pages' cache of rendered fragments
# (diagnosis/pages/support/page_cache.py) is shared in Redis when there is one, else each
# process's own memory too. Short timeouts: a slow Redis costs a page a fraction of a second,
# and then the process renders without it for a while.
_PAGES_IN_MEMORY = {
    "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
    "LOCATION": "gpuobs-pages",
    "OPTIONS": {"MAX_ENTRIES": 300},  # a fairness fragment is ~200 KB: ~60 MB at most
}
# The API throttles and their counts (diagnosis/throttling.py): shared by every process in Redis,
# so the documented rate is the rate whatever the number of gunicorn workers; the process's own
# memory in the embedded mode (one process).
_THROTTLE_IN_MEMORY = {
    "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
    "LOCATION": "gpuobs-throttle",
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _CACHE_LOCATION,
        "KEY_PREFIX": "gpuobs-throttle",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5, **_CACHE_SENTINEL},
    }
    if REDIS_URL
    else _THROTTLE_IN_MEMORY,
    "pages": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _CACHE_LOCATION,
        "KEY_PREFIX": "gpuobs-pages",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5, **_CACHE_SENTINEL},
    }
    if REDIS_URL
    else _PAGES_IN_MEMORY,
}
# What GPU-hours cost (docs/accounting.md, Cost): a price per GPU-hour per GPU model,
# "MODEL=PRICE,MODEL=PRICE" ("*=PRICE": any other model), which a cluster's declared
# gpu_hour_prices override model by model; empty: nothing is priced. One currency for all.
GPUOBS_GPU_HOUR_PRICES = os.environ.get("GPUOBS_GPU_HOUR_PRICES", "")
GPUOBS_CURRENCY = os.environ.get("GPUOBS_CURRENCY", "USD").strip() or "USD"
try:
    parse_price_text(GPUOBS_GPU_HOUR_PRICES, where="GPUOBS_GPU_HOUR_PRICES")
except PriceError as error:
    raise ImproperlyConfigured(str(error)) from None
if len(GPUOBS_CURRENCY) > 8 or not GPUOBS_CURRENCY.isalpha():
    raise ImproperlyConfigured(f"GPUOBS_CURRENCY: a currency code, not {GPUOBS_CURRENCY!r}")
# How long a cached page fragment lives at most (0: no page cache); a new cycle replaces it.
GPUOBS_PAGE_CACHE_SECONDS = env_int("GPUOBS_PAGE_CACHE_SECONDS", 300)

GPUOBS_CYCLE_SECONDS = env_int("GPUOBS_CYCLE_SECONDS", 60)
# Kubernetes clusters' cycles go to mirror-<cluster id mod this>, each queue consumed by one
# single-process worker holding those clusters' list/watch mirrors (0: on `diagnose`, a mirror
# per process; docs/operations.md "One Kubernetes mirror per cluster").
GPUOBS_MIRROR_QUEUES = env_int("GPUOBS_MIRROR_QUEUES", 1)
if GPUOBS_MIRROR_QUEUES < 0:
    raise ImproperlyConfigured(f"GPUOBS_MIRROR_QUEUES must be >= 0, not {GPUOBS_MIRROR_QUEUES}")
# how often a live page asks whether a new cycle landed (docs/ui.md "Live updates")
GPUOBS_LIVE_POLL_SECONDS = env_int("GPUOBS_LIVE_POLL_SECONDS", 10)
CELERY_TASK_TIME_LIMIT = env_int("GPUOBS_TASK_TIME_LIMIT", 300)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("GPUOBS_TASK_SOFT_TIME_LIMIT", 240)
# A cycle's lock lives one cycle period and is renewed while the cycle runs, so a killed worker's
# lock frees itself within one period and a live cycle's lock never expires under it
# (diagnosis/tasks.py). An apply claim is another worker's to take over once it is older than
# the hard time limit (no task outlives it) and a few seconds (diagnosis/actions/workflow/apply.py).
GPUOBS_CYCLE_LOCK_SECONDS = max(3, GPUOBS_CYCLE_SECONDS)
# A cycle whose collection's shards are out (a chord) keeps its lock this long at most: shards
# not all back by then are a failed cycle row, and the next cycle runs (diagnosis/tasks.py).
GPUOBS_SHARD_DEADLINE_SECONDS = env_int(
    "GPUOBS_SHARD_DEADLINE_SECONDS", min(CELERY_TASK_TIME_LIMIT, max(2 * GPUOBS_CYCLE_SECONDS, 30))
)
# Beat sends the worker heartbeat this often (at most 15 s, the cycle period when shorter):
# /healthz?deep=1 reports a worker or beat dead after three of them and 5 s (50 s by default).
GPUOBS_HEARTBEAT_SECONDS = env_int("GPUOBS_HEARTBEAT_SECONDS", min(GPUOBS_CYCLE_SECONDS, 15))
GPUOBS_APPLY_CLAIM_STALE_SECONDS = CELERY_TASK_TIME_LIMIT + 5
# A worker whose clock is further than this from the database's refuses to run cycles
# (diagnosis/actions/upkeep/health.py, "One clock").
GPUOBS_MAX_CLOCK_SKEW_SECONDS = env_int("GPUOBS_MAX_CLOCK_SKEW_SECONDS", 30)
# A snapshot whose node or GPU count fell by more than this percentage since the last good cycle
# (or to zero) is not judged until an SRE confirms it or it holds for GPUOBS_SIZE_HOLD_CYCLES
# cycles (diagnosis/actions/records/cluster_size.py)
GPUOBS_SIZE_DROP_SHARE = env_int("GPUOBS_SIZE_DROP_PERCENT", 50) / 100
GPUOBS_SIZE_HOLD_CYCLES = env_int("GPUOBS_SIZE_HOLD_CYCLES", 5)
# ... and so is one whose live (running + pending) jobs fell by more than this percentage (or to
# zero) from at least GPUOBS_SIZE_JOBS_MIN: a scheduler that lost its jobs but not its nodes
GPUOBS_SIZE_JOB_DROP_SHARE = env_int("GPUOBS_SIZE_JOB_DROP_PERCENT", 50) / 100
GPUOBS_SIZE_JOBS_MIN = env_int("GPUOBS_SIZE_JOBS_MIN", 10)

if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    # Embedded mode: no broker; every task runs in the process that sends it.
    CELERY_BROKER_URL = "memory://"
    CELERY_RESULT_BACKEND = None
    CELERY_TASK_ALWAYS_EAGER = True
    CELERY_TASK_EAGER_PROPAGATES = True

CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
# Results live no longer than the longest a task may run and a minute (they were kept 24 h): a
# cycle's collect shard results are deleted once the cycle read them (diagnosis/tasks.py), one
# nobody read (a shard that finished after its cycle gave up on it) expires with this
# (docs/operations.md, "Redis").
CELERY_RESULT_EXPIRES = CELERY_TASK_TIME_LIMIT + 60
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Riding out a broker restart (issue #18; docs/operations.md, "Faults and supervision"):
# retry the connection forever, with short socket timeouts and a health check so a dead
# connection is noticed, and redeliver the message of a task whose pool process died (every task
# is idempotent: cycles are locked per cluster and interval, applies claim an idempotency key).
# The worker no longer dies on reconnect: gpuobs/broker.py works around kombu's Redis transport
# reading the closed connection's ``client`` (celery/kombu#582, #970).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_CONNECTION_TIMEOUT = 5
CELERY_BROKER_TRANSPORT = (
    None
    if not REDIS_URL
    else "gpuobs.broker:SentinelTransport"
    if _SENTINEL
    else "gpuobs.broker:RedisTransport"
)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
    "socket_keepalive": True,
    "health_check_interval": 10,
    "retry_on_timeout": True,
    # A message a killed worker held comes back after this (kombu's default is an hour); longer
    # than any task may run (the hard time limit) plus the longest apply retry backoff (120 s).
    "visibility_timeout": CELERY_TASK_TIME_LIMIT + 180,
}
if _SENTINEL:
    CELERY_BROKER_TRANSPORT_OPTIONS["master_name"] = GPUOBS_REDIS_SENTINEL_MASTER
    CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"master_name": GPUOBS_REDIS_SENTINEL_MASTER}
CELERY_REDIS_SOCKET_TIMEOUT = 10
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = 5
CELERY_REDIS_RETRY_ON_TIMEOUT = True
CELERY_REDIS_BACKEND_HEALTH_CHECK_INTERVAL = 10
CELERY_RESULT_BACKEND_ALWAYS_RETRY = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A task running when the broker connection drops finishes; its ack is lost, so its message comes
# back after the visibility timeout and finds the work done (a duplicate apply, a locked cycle).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TIMEZONE = TIME_ZONE

# --- email (fairness report subscriptions) -------------------------------------------------------

# With DJANGO_EMAIL_HOST set, mail goes out by SMTP; without it, to the console (the log).
EMAIL_HOST = os.environ.get("DJANGO_EMAIL_HOST", "")
EMAIL_PORT = env_int("DJANGO_EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("DJANGO_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("DJANGO_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("DJANGO_EMAIL_USE_TLS", True)
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = os.environ.get("DJANGO_DEFAULT_FROM_EMAIL", "gpuobs@localhost")

# --- logging -------------------------------------------------------------------------------------

# One format for Django, Celery and gunicorn (GPUOBS_LOG_FORMAT=text|json) and a request id on
# every line, carried into the Celery tasks a request sends (gpuobs/logs.py; docs/operations.md,
# "Logs"). RequestIdMiddleware comes first so that every answer carries X-Request-ID.
try:
    GPUOBS_LOG_FORMAT = gpuobs_logs.log_format()
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
LOGGING = gpuobs_logs.logging_config(os.environ.get("DJANGO_LOG_LEVEL", "INFO"))
MIDDLEWARE.insert(0, "gpuobs.logs.RequestIdMiddleware")

# --- identities from the company's IdP (docs/operations.md, "Single sign-on") -------------------
# OpenID Connect (diagnosis/identity/oidc.py, mozilla-django-oidc): on when GPUOBS_OIDC_ISSUER is
# set; the endpoints come from its discovery document, the client secret from the GPUOBS_SECRET_*
# variable GPUOBS_OIDC_CLIENT_SECRET_ENV names. A trusted auth proxy's header
# (diagnosis/identity/proxy.py): on when GPUOBS_AUTH_PROXY_USER_HEADER names one, honoured only
# from GPUOBS_AUTH_PROXY_TRUSTED. Both map the IdP's groups with GPUOBS_ROLE_MAP
# (diagnosis/identity/role_map.py). GPUOBS_LOCAL_LOGIN=0 turns password logins off.
GPUOBS_OIDC_ISSUER = os.environ.get("GPUOBS_OIDC_ISSUER", "").strip()
GPUOBS_OIDC_CLIENT_SECRET_ENV = os.environ.get("GPUOBS_OIDC_CLIENT_SECRET_ENV", "").strip()
if GPUOBS_OIDC_CLIENT_SECRET_ENV and not GPUOBS_OIDC_CLIENT_SECRET_ENV.startswith("GPUOBS_SECRET_"):
    raise ImproperlyConfigured("GPUOBS_OIDC_CLIENT_SECRET_ENV must name a GPUOBS_SECRET_* variable")
GPUOBS_OIDC_GROUPS_CLAIM = os.environ.get("GPUOBS_OIDC_GROUPS_CLAIM", "groups")
GPUOBS_OIDC_USERNAME_CLAIM = os.environ.get("GPUOBS_OIDC_USERNAME_CLAIM", "preferred_username")
GPUOBS_OIDC_PROVIDER_NAME = os.environ.get("GPUOBS_OIDC_PROVIDER_NAME", "")
OIDC_RP_CLIENT_ID = os.environ.get("GPUOBS_OIDC_CLIENT_ID", "")
if GPUOBS_OIDC_ISSUER and not OIDC_RP_CLIENT_ID:
    raise ImproperlyConfigured("GPUOBS_OIDC_CLIENT_ID must be set with GPUOBS_OIDC_ISSUER")
OIDC_RP_SCOPES = os.environ.get("GPUOBS_OIDC_SCOPES", "openid email profile groups")
OIDC_RP_SIGN_ALGO = os.environ.get("GPUOBS_OIDC_SIGN_ALGO", "RS256")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_int("GPUOBS_OIDC_TIMEOUT_SECONDS", 10)
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=failed"
GPUOBS_AUTH_PROXY_USER_HEADER = os.environ.get("GPUOBS_AUTH_PROXY_USER_HEADER", "").strip()
GPUOBS_AUTH_PROXY_GROUPS_HEADER = os.environ.get(
    "GPUOBS_AUTH_PROXY_GROUPS_HEADER", "X-Forwarded-Groups"
).strip()
GPUOBS_AUTH_PROXY_TRUSTED = env_list("GPUOBS_AUTH_PROXY_TRUSTED")
if GPUOBS_AUTH_PROXY_USER_HEADER and not GPUOBS_AUTH_PROXY_TRUSTED:
    raise ImproperlyConfigured(
        "GPUOBS_AUTH_PROXY_TRUSTED (the proxy's addresses or networks) must be set with "
        "GPUOBS_AUTH_PROXY_USER_HEADER"
    )
GPUOBS_ROLE_MAP = os.environ.get("GPUOBS_ROLE_MAP", "")
GPUOBS_LOCAL_LOGIN = env_bool("GPUOBS_LOCAL_LOGIN", default=True)
AUTHENTICATION_BACKENDS = [
    *(
        b
        for b in AUTHENTICATION_BACKENDS
        if GPUOBS_LOCAL_LOGIN or b != "django.contrib.auth.backends.ModelBackend"
    ),
    "diagnosis.identity.oidc.OIDCBackend",
    "diagnosis.identity.proxy.ProxyHeaderBackend",
]
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "diagnosis.identity.proxy.TrustedProxyMiddleware",
)

# --- gpuobs --------------------------------------------------------------------------------------

GPUOBS_ADMIN_PASSWORD = os.environ.get("GPUOBS_ADMIN_PASSWORD") or None
# Alertmanager webhook (POST /api/v1/alertmanager): alert names that mean an Xid or a GPU health
# failure (comma-separated; empty keeps the defaults of diagnosis.edge.sources.alertmanager) and the
# label naming the gpuobs cluster (when the receiver URL has no ?cluster=).
GPUOBS_ALERTMANAGER_XID_ALERTS = env_list("GPUOBS_ALERTMANAGER_XID_ALERTS")
GPUOBS_ALERTMANAGER_HEALTH_ALERTS = env_list("GPUOBS_ALERTMANAGER_HEALTH_ALERTS")
GPUOBS_ALERTMANAGER_CLUSTER_LABEL = os.environ.get("GPUOBS_ALERTMANAGER_CLUSTER_LABEL", "cluster")
# Outbound (docs/integrations.md, "Findings and incidents to Alertmanager"): firing findings at or
# above a severity (per rule: "xid=critical,low-mfu=warning") and open incidents go to
# Alertmanager's v2 API each cycle. Credentials by reference: the name of a GPUOBS_SECRET_*
# environment variable holding a bearer token, or a user and such a variable holding a password.
GPUOBS_ALERTMANAGER_URL = os.environ.get("GPUOBS_ALERTMANAGER_URL", "")
GPUOBS_ALERTMANAGER_TOKEN_ENV = os.environ.get("GPUOBS_ALERTMANAGER_TOKEN_ENV", "")
GPUOBS_ALERTMANAGER_USERNAME = os.environ.get("GPUOBS_ALERTMANAGER_USERNAME", "")
GPUOBS_ALERTMANAGER_PASSWORD_ENV = os.environ.get("GPUOBS_ALERTMANAGER_PASSWORD_ENV", "")
GPUOBS_ALERTMANAGER_MIN_SEVERITY = os.environ.get("GPUOBS_ALERTMANAGER_MIN_SEVERITY", "warning")
GPUOBS_ALERTMANAGER_RULE_SEVERITY = env_list("GPUOBS_ALERTMANAGER_RULE_SEVERITY")
GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS = env_int("GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS", 5)
# OpenTelemetry traces (docs/operations.md, "Traces"): an OTLP/HTTP collector's base URL
# (http://otel-collector:4318); unset, tracing is off and nothing of OpenTelemetry is imported.
GPUOBS_OTLP_ENDPOINT = os.environ.get("GPUOBS_OTLP_ENDPOINT", "").strip()
# The external URL of gpuobs (generatorURL of its alerts, links in notices and the dashboard).
GPUOBS_EXTERNAL_URL = os.environ.get("GPUOBS_EXTERNAL_URL", "http://127.0.0.1:8000")
# /metrics: at most this many per-finding series (gpuobs_finding_info) per cluster.
GPUOBS_METRICS_MAX_FINDING_SERIES = env_int("GPUOBS_METRICS_MAX_FINDING_SERIES", 500)
# Recommendation workflow (docs/recommendations.md, "Workflow"): an approval lapses after
# GPUOBS_APPROVAL_TTL_SECONDS unless applied; an applied change is worse (a verified one,
# regressed) after GPUOBS_VERIFY_CYCLES judged cycles in a row each worse by more than
# GPUOBS_VERIFY_TOLERANCE_PCT percent of its baseline, at least one unit (a rollback is due), and
# watched for at most GPUOBS_VERIFY_MAX_CYCLES.
GPUOBS_APPROVAL_TTL_SECONDS = env_int("GPUOBS_APPROVAL_TTL_SECONDS", 4 * 3600)
GPUOBS_VERIFY_CYCLES = env_int("GPUOBS_VERIFY_CYCLES", 3)
GPUOBS_VERIFY_MAX_CYCLES = env_int("GPUOBS_VERIFY_MAX_CYCLES", 24)
GPUOBS_VERIFY_TOLERANCE_PCT = env_int("GPUOBS_VERIFY_TOLERANCE_PCT", 10)
# A change is verified after GPUOBS_VERIFY_GOOD_CYCLES consecutive good cycles (its findings
# resolved, its metric better than before). A proposal whose cause stops for a cycle or two is
# kept (one id) for GPUOBS_RECOMMENDATION_HOLD_OFF_SECONDS of snapshot time before it expires.
GPUOBS_VERIFY_GOOD_CYCLES = env_int("GPUOBS_VERIFY_GOOD_CYCLES", 3)
GPUOBS_RECOMMENDATION_HOLD_OFF_SECONDS = env_int("GPUOBS_RECOMMENDATION_HOLD_OFF_SECONDS", 2 * 3600)

# --- topology uploads (diagnosis/actions/records/topology.py, docs/integrations.md) ---------------
# A cluster stores the topology of at most this many nodes: an upload for one more node is refused
# (a node already stored may always replace its own).
GPUOBS_TOPOLOGY_MAX_NODES = env_int("GPUOBS_TOPOLOGY_MAX_NODES", 16384)

# --- impact estimates apart from the cycle (diagnosis/actions/workflow/impact.py,
# docs/operations.md) ---
# At most GPUOBS_IMPACT_MAX_PER_CYCLE estimates are sent to the ``impact`` queue per cycle (the
# most GPU-hours at stake first); one sent is not sent again for GPUOBS_IMPACT_REQUEUE_SECONDS.
# Clusters of GPUOBS_IMPACT_REDUCED_FROM_GPUS GPUs or more are replayed with the reduced model.
GPUOBS_IMPACT_MAX_PER_CYCLE = env_int("GPUOBS_IMPACT_MAX_PER_CYCLE", 8)
GPUOBS_IMPACT_REQUEUE_SECONDS = env_int("GPUOBS_IMPACT_REQUEUE_SECONDS", 900)
GPUOBS_IMPACT_REDUCED_FROM_GPUS = env_int("GPUOBS_IMPACT_REDUCED_FROM_GPUS", 8192)
# Where tasks run in-process (the embedded mode), "deferred" keeps impact estimates out of the
# cycle: the demo's loop runs them between cycles, the web process in a thread, a one-shot command
# leaves them pending and says so; "inline" runs each where it is sent (diagnosis/actions/
# enqueue.py). Default: "deferred" without REDIS_URL; with it tasks go to the workers and this only
# matters where a test runs them in-process.
GPUOBS_EMBEDDED_IMPACTS = os.environ.get(
    "GPUOBS_EMBEDDED_IMPACTS", "inline" if REDIS_URL else "deferred"
).strip()
if GPUOBS_EMBEDDED_IMPACTS not in {"deferred", "inline"}:
    raise ImproperlyConfigured(
        f"GPUOBS_EMBEDDED_IMPACTS must be deferred or inline, not {GPUOBS_EMBEDDED_IMPACTS!r}"
    )

# --- start-time forecasts of pending jobs (diagnosis/actions/records/forecasts.py,
# docs/forecasts.md) ---
# After a cycle, a cluster's pending jobs are forecast on the ``impact`` queue, at most once per
# GPUOBS_FORECAST_SECONDS of snapshot time (0: never); clusters of
# GPUOBS_IMPACT_REDUCED_FROM_GPUS GPUs or more with the reduced model (2 seeds, 6 h).
GPUOBS_FORECAST_SECONDS = env_int("GPUOBS_FORECAST_SECONDS", 300)

# --- retention (diagnosis/actions/upkeep/retention.py, docs/operations.md "Retention") ------------
# Days each table keeps its rows (0: forever); rollups older than GPUOBS_ROLLUP_HOURLY_AFTER_DAYS
# are merged into one row per scope and hour. Beat prunes every GPUOBS_RETENTION_SECONDS, at most
# GPUOBS_RETENTION_BATCH rows per statement, each batch its own short transaction.
GPUOBS_RETAIN_SNAPSHOTS_DAYS = env_int("GPUOBS_RETAIN_SNAPSHOTS_DAYS", 7)
GPUOBS_RETAIN_CYCLES_DAYS = env_int("GPUOBS_RETAIN_CYCLES_DAYS", 30)
GPUOBS_RETAIN_FINDING_EVENTS_DAYS = env_int("GPUOBS_RETAIN_FINDING_EVENTS_DAYS", 90)
GPUOBS_RETAIN_REPLAYS_DAYS = env_int("GPUOBS_RETAIN_REPLAYS_DAYS", 2)
GPUOBS_ROLLUP_HOURLY_AFTER_DAYS = env_int("GPUOBS_ROLLUP_HOURLY_AFTER_DAYS", 30)
GPUOBS_RETENTION_BATCH = env_int("GPUOBS_RETENTION_BATCH", 2000)
GPUOBS_RETENTION_SECONDS = env_int("GPUOBS_RETENTION_SECONDS", 900)
