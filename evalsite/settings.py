"""memeval settings: one file, driven by environment variables.

With no environment at all it runs the embedded default: SQLite, the in-memory channel layer, eager
Celery, the local SmolLM2 model and wordllama embeddings. Production differs only in env vars
(see the table in README.md). Every value is parsed strictly (evalsite/env.py): a value that is not
understood stops the process with a message naming the variable, instead of becoming a default.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from evalsite.clientaddr import parse_networks
from evalsite.env import Env

BASE_DIR = Path(__file__).resolve().parent.parent
env = Env()
django_stubs_ext.monkeypatch()  # lets Django's generic classes take type parameters at run time: ModelAdmin[Study]

DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
SECRET_KEY = env.text("SECRET_KEY", DEV_SECRET_KEY)
DEBUG = env.boolean("DEBUG", True)
if not DEBUG and SECRET_KEY == DEV_SECRET_KEY:
    # Refused here, not only by `check --deploy`: daphne, Celery and every manage.py command stop at once.
    raise ImproperlyConfigured("DEBUG is off but SECRET_KEY is not set: set SECRET_KEY to a long random string.")
ALLOWED_HOSTS = env.strings("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env.strings("CSRF_TRUSTED_ORIGINS")
SITE_URL = env.text("SITE_URL", "http://localhost:8000")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "axes",
    "infra",
    "runtime",
    "studies",
    "chat",
    "pairwise",
    "annotation",
    "reports",
    "judges",
    "prolific",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "studies.limits.UploadGrantMiddleware",  # a researcher's browser may send files (the body limit's grant)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "studies.preview.PreviewEndedMiddleware",  # a tab of a preview deleted under it: why, not a bare 404
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into the lockout page
]

# AxesBackend first: it refuses a locked-out username + IP before the password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesBackend", "django.contrib.auth.backends.ModelBackend"]

if not DEBUG:
    # In production WhiteNoise serves the collected static files (collectstatic at deploy);
    # in development daphne's runserver serves them from the app folders.
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "evalsite.urls"
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
                "studies.preview.preview_banner",  # "Preview: nothing is recorded" on the worker's pages
            ],
        },
    }
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "evalsite.asgi.application"

# --- database: SQLite (WAL) by default, PostgreSQL (psycopg 3) from DATABASE_URL
DATABASES = {
    "default": dj_database_url.parse(
        env.text("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"), conn_max_age=0, conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Django's backend, with the process's writers queued in Python rather than napping in SQLite's
    # busy handler (infra/sqlite/base.py)
    DATABASES["default"]["ENGINE"] = "infra.sqlite"
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA busy_timeout=5000; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
# PostgreSQL: a pool of connections per process (Django's psycopg_pool integration), so a request, a socket
# message or a Celery task borrows an open connection instead of logging in anew (a forked backend each:
# 2.6 per chat turn without it, docs/operations.md "Capacity planning"). CONN_MAX_AGE stays 0, which with
# a pool means "give it back after each unit of work"; the health checks make the pool test a connection
# before lending it, so one cut while it sat idle (a PostgreSQL restart, an idle reaper) is replaced.
DB_POOL = env.boolean("DB_POOL", True)
DB_POOL_MIN_SIZE = env.integer("DB_POOL_MIN_SIZE", 1, minimum=0)
DB_POOL_MAX_SIZE = env.integer("DB_POOL_MAX_SIZE", 8, minimum=1)
DB_POOL_TIMEOUT_SECONDS = env.number("DB_POOL_TIMEOUT_SECONDS", 10.0, minimum=0.1)
if DB_POOL_MAX_SIZE < DB_POOL_MIN_SIZE:
    raise ImproperlyConfigured(
        f"DB_POOL_MAX_SIZE={DB_POOL_MAX_SIZE} is below DB_POOL_MIN_SIZE={DB_POOL_MIN_SIZE}: raise the maximum."
    )
if DB_POOL and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": DB_POOL_MIN_SIZE,
        "max_size": DB_POOL_MAX_SIZE,
        # a request that finds every connection lent out waits this long, then fails with a database error
        "timeout": DB_POOL_TIMEOUT_SECONDS,
        "max_idle": 300.0,  # connections above min_size that nobody borrowed for 5 minutes are closed
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# PostgreSQL: the annotation claim and submit are prepared once per connection (annotation/services.py,
# _prepared_cursor). Off for a pooler that cannot keep prepared statements (PgBouncer < 1.21).
ANNOTATION_PREPARED_STATEMENTS = env.boolean("ANNOTATION_PREPARED_STATEMENTS", True)

# --- channels, Celery and the cache: Redis from REDIS_URL, else in-memory layer, eager tasks, process memory
REDIS_URL = env.text("REDIS_URL")
_eager = env.boolean("CELERY_TASK_ALWAYS_EAGER", False)  # parsed even where it is forced, so a typo still shows
if REDIS_URL:
    # One cache for every web process and worker: the limits by address, study and site count together
    # (infra/ratelimit.py), and a power simulation's status is seen by whichever web process the page polls.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    # Clocks: channels_redis scores a group's members and a socket's queued frames with time.time() of the
    # process that adds or sends them, and each send drops the members older than group_expiry and the frames
    # older than expiry by the *sender's* clock. A sender whose clock is ahead by more than group_expiry (a
    # wall-clock step of one process: NTP, a VM resumed) dropped every page's socket from its session group
    # (no frames until its next ping or resume); one ahead by more than expiry drops frames other processes
    # queued. Both are far beyond a plausible step (a day, 15 minutes): a socket leaves its groups on
    # disconnect (group_discard), one that died with its daphne only costs its session's sends a copy to a
    # key that expires (expiry, on Redis' clock) until the group's own expiry; live pages still renew their
    # membership with their ping every minute (static/js/live.js).
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # capacity: frames queued for one socket before channels_redis drops new ones (its default, 100,
            # dropped replies' final frames when one web process served 200 sockets at full load:
            # docs/operations.md, "Capacity planning"); a turn queues a handful, so this bounds nothing real.
            "CONFIG": {"hosts": [REDIS_URL], "group_expiry": 86400, "expiry": 900, "capacity": 1000},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = _eager
else:
    # channels' in-memory layer with cheaper bookkeeping (runtime/layers.py): one process, no Redis
    CHANNEL_LAYERS = {"default": {"BACKEND": "runtime.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True  # a task whose worker dies is redelivered; tasks are idempotent
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# No remote control (celery inspect/control: memeval never uses it). Its mailbox is a Redis pub/sub connection
# beside the tasks' BRPOP: when a Redis restart reached it first, the consumer's close read the dead BRPOP,
# left the channel half closed and the next close crashed the worker's consumer (kombu 5.7: AttributeError
# in _connparams; "Unrecoverable error") so it consumed nothing more. With only the BRPOP connection, a broker
# loss is seen there and the consumer reconnects. docker-compose's workers also run --without-gossip
# --without-mingle --without-heartbeat (gossip is another pub/sub consumer). runtime/tasks.py: the ack of a
# task delivered before the reconnect.
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
# Each lane of the job runtime (runtime/kinds.py) is a queue of its own, so a reply never waits behind a memory
# update, a readiness check or a simulation: docker-compose runs one worker per queue; a plain
# `celery -A evalsite worker` consumes them all.
CELERY_TASK_QUEUES = [Queue("celery"), Queue("memory"), Queue("long")]
RUNTIME_LANE_QUEUES = {"reply": "celery", "memory": "memory", "long": "long", "plan": "long"}
# A job is sent to its lane's queue by runtime/executor.py; the other tasks (beat's) go to the default queue.
CELERY_TASK_ROUTES: dict[str, dict[str, str]] = {}
# The embedded default runs these lanes in a child process each, at a lower CPU priority (runtime/executor.py):
# readiness checks, evaluations and power simulations then never take the cores or the interpreter lock from
# the web process's replies. "none": every lane is a thread of the web process.
_process_lanes = env.text("RUNTIME_PROCESS_LANES", "long,plan").replace(" ", "")
RUNTIME_PROCESS_LANES = () if _process_lanes == "none" else tuple(_process_lanes.split(","))
if not set(RUNTIME_PROCESS_LANES) <= {"long", "plan", "memory"}:
    raise ImproperlyConfigured(
        f"RUNTIME_PROCESS_LANES={_process_lanes}: lanes that may run in a child process are long, plan and memory "
        "(replies stream from the web process), or none."
    )
RUNTIME_PROCESS_NICE = env.integer("RUNTIME_PROCESS_NICE", 10, minimum=0)
# How often lost jobs are looked for (runtime/sweeper.py): Celery beat in production, a thread in the embedded
# default; pages that wait for a job also look for theirs. 0 turns the thread off.
RUNTIME_SWEEP_SECONDS = env.number("RUNTIME_SWEEP_SECONDS", 10.0, minimum=0)
# Periodic upkeep, sent by the one `celery -A evalsite beat` process (docker-compose's "beat" service):
# workers gone too long are marked abandoned (chat/timing.py); annotation claims sweep their own queue's
# expired leases at most every 30 s, and the beat returns stale claims in queues nobody is claiming from
# too (docs/annotation.md). `expires`: a tick no worker picked up within its minute is dropped.
SWEEP_ABANDONED_SECONDS = env.number("SWEEP_ABANDONED_SECONDS", 300.0)
# Prolific (prolific/, docs/operations.md "Running a study on Prolific"): the API token (never logged or shown),
# the API's URL (a test double's in tests), the workspace's webhook secret, and how often beat polls.
PROLIFIC_API_TOKEN = env.text("PROLIFIC_API_TOKEN")
PROLIFIC_API_URL = env.text("PROLIFIC_API_URL", "https://api.prolific.com")
PROLIFIC_API_TIMEOUT_SECONDS = env.number("PROLIFIC_API_TIMEOUT_SECONDS", 10.0)
PROLIFIC_WEBHOOK_SECRET = env.text("PROLIFIC_WEBHOOK_SECRET")
PROLIFIC_SYNC_SECONDS = env.number("PROLIFIC_SYNC_SECONDS", 600.0)
CELERY_BEAT_SCHEDULE = {
    "sweep-abandoned": {"task": "chat.tasks.sweep_abandoned_task", "schedule": SWEEP_ABANDONED_SECONDS},
    "sweep-lost-jobs": {
        "task": "runtime.tasks.sweep_task",
        "schedule": max(1.0, RUNTIME_SWEEP_SECONDS or 10.0),
        "options": {"expires": max(1.0, RUNTIME_SWEEP_SECONDS or 10.0)},
    },
    # each study's retention period (chat/privacy.py): hourly is plenty for a period counted in days
    "sweep-retention": {"task": "chat.tasks.sweep_retention_task", "schedule": 3600.0, "options": {"expires": 3000.0}},
    "prolific-sync": {"task": "prolific.tasks.prolific_sync_task", "schedule": PROLIFIC_SYNC_SECONDS},
    "expire-annotation-leases": {
        "task": "annotation.tasks.expire_leases_task",
        "schedule": 60.0,
        "options": {"expires": 55.0},
    },
}

# --- chat reply and memory-update jobs (chat/replies.py, chat/memory_updates.py)
# CHAT_JOB_MODE: "" = Celery with workers, a thread when Celery is eager; or force celery | thread | inline
CHAT_JOB_MODE = env.choice("CHAT_JOB_MODE", "", ["celery", "thread", "inline"])
# Thread mode (the embedded default): replies and memory updates run in separate pools of the web
# process, as production runs them on separate queues and workers (runtime/executor.py).
CHAT_REPLY_THREADS = env.integer("CHAT_REPLY_THREADS", 4, minimum=1)
CHAT_MEMORY_THREADS = env.integer("CHAT_MEMORY_THREADS", 2, minimum=1)
# A reply's retries (chat/replies.py): the waits (s) before retry 1, 2, ...; the last repeats until the reply's
# deadline; each drawn between (1 - CHAT_RETRY_JITTER) and 1 times its value, so replies that failed
# together do not come back together. An endpoint's Retry-After is the least wait.
CHAT_RETRY_DELAYS = env.numbers("CHAT_RETRY_DELAYS", "1,2,4,8")
CHAT_RETRY_JITTER = env.number("CHAT_RETRY_JITTER", 0.5)
CHAT_RETRY_MAX_ATTEMPTS = env.integer("CHAT_RETRY_MAX_ATTEMPTS", 0, minimum=0)  # 0: no limit but the deadline
# A slow stream gives its slot back (chat/replies.py): an attempt is cut and retried when no piece came for
# CHAT_STALL_SECONDS (each read, the first token's included), when after CHAT_STREAM_GRACE_SECONDS it
# streams fewer than CHAT_MIN_TOKENS_PER_SECOND, or when it has run CHAT_ATTEMPT_SECONDS.
CHAT_STALL_SECONDS = env.number("CHAT_STALL_SECONDS", 10.0, minimum=0.1)
CHAT_STREAM_GRACE_SECONDS = env.number("CHAT_STREAM_GRACE_SECONDS", 3.0)
CHAT_MIN_TOKENS_PER_SECOND = env.number("CHAT_MIN_TOKENS_PER_SECOND", 3.0)
CHAT_ATTEMPT_SECONDS = env.number("CHAT_ATTEMPT_SECONDS", 30.0, minimum=1)
# A memory update's retries (chat/memory_updates.py): these waits (s), the last repeating, for as long as
# CHAT_MEMORY_RETRY_SECONDS after the session ended (an outage of minutes costs no session's memory); only
# then is the previous state kept and the next session made ready.
CHAT_MEMORY_RETRY_DELAYS = env.numbers("CHAT_MEMORY_RETRY_DELAYS", "5,10,20,30")
CHAT_MEMORY_RETRY_SECONDS = env.number("CHAT_MEMORY_RETRY_SECONDS", 900.0, minimum=1)
CHAT_TOKEN_FLUSH_SECONDS = env.number("CHAT_TOKEN_FLUSH_SECONDS", 0.05)  # coalesce streamed pieces
# Reply pacing (chat/pacing.py) is a study setting; false turns it off for every study on this site (benchmarks
# of the platform's own latency, the test suite).
CHAT_REPLY_PACING = env.boolean("CHAT_REPLY_PACING", True)
# Parsed memory states kept per process by (episode, state_version) (chat/state.py): a reply reads only the
# version and parses the state on a miss. Bounded by episodes and by an estimate of their size; 0 turns it off.
CHAT_STATE_CACHE_ENTRIES = env.integer("CHAT_STATE_CACHE_ENTRIES", 256, minimum=0)
CHAT_STATE_CACHE_MB = env.number("CHAT_STATE_CACHE_MB", 256.0)
# Debugging aid (on in the tests): keep each cached state's JSON and raise if a state was edited in place.
CHAT_STATE_CACHE_VERIFY = env.boolean("CHAT_STATE_CACHE_VERIFY", False)
# Faults (runtime/leases.py): a reply has an overall deadline; a job is held by a lease that a heartbeat
# extends, so a dead job is noticed within a lease and taken back by the sweeper (runtime/sweeper.py).
CHAT_REPLY_DEADLINE_SECONDS = env.number("CHAT_REPLY_DEADLINE_SECONDS", 90.0, minimum=1)
CHAT_JOB_LEASE_SECONDS = env.number("CHAT_JOB_LEASE_SECONDS", 15.0, minimum=1)
CHAT_JOB_QUEUE_GRACE_SECONDS = env.number("CHAT_JOB_QUEUE_GRACE_SECONDS", 20.0)
# Celery: a task a worker took but never acknowledged (the worker died) goes back to the queue after the
# visibility timeout; it must exceed the longest task (time limits below) plus its retry countdowns.
CHAT_MEMORY_TIME_LIMIT_SECONDS = env.number("CHAT_MEMORY_TIME_LIMIT_SECONDS", 600.0, minimum=10)
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # a killed worker process's task is queued again at once
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": int(CHAT_MEMORY_TIME_LIMIT_SECONDS + 300)}

# --- LLM and embeddings (memory/llm.py, memory/embed.py). The arm's own backend/model win when set.
LLM_BACKEND = env.choice("LLM_BACKEND", "local", ["local", "openai", "scripted"])
LLM_MODEL = env.text("LLM_MODEL")
OPENAI_API_KEY = env.text("OPENAI_API_KEY")
OPENAI_BASE_URL = env.text("OPENAI_BASE_URL")
# The client's timeouts: each read of a response (a whole answer that is not streamed: a memory update's
# calls), and connecting. A chat reply caps both by CHAT_STALL_SECONDS and its time left (memory.llm.time_limit).
LLM_TIMEOUT_SECONDS = env.number("LLM_TIMEOUT_SECONDS", 60.0, minimum=0.001)
LLM_CONNECT_TIMEOUT_SECONDS = env.number("LLM_CONNECT_TIMEOUT_SECONDS", 5.0, minimum=0.001)
LLM_MAX_TOKENS = env.integer("LLM_MAX_TOKENS", 120, minimum=1)
EMBEDDER = env.choice("EMBEDDER", "wordllama", ["wordllama", "openai", "minilm", "hashing"])
EMBEDDING_MODEL = env.text("EMBEDDING_MODEL")

# --- auth, sessions, security
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"
AUTH_PASSWORD_VALIDATORS = (
    []
    if DEBUG
    else [
        {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
        {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    ]
)
SESSION_COOKIE_AGE = 60 * 60 * 24 * 30
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env.boolean("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env.integer("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# --- limits on what one request may send (evalsite/bodylimit.py refuses more with 413 before reading it)
MAX_REQUEST_BYTES = int(env.number("MAX_REQUEST_MB", 2.5, minimum=0.001) * 2**20)  # any request body
MAX_UPLOAD_BYTES = int(env.number("MAX_UPLOAD_MB", 50.0, minimum=0.001) * 2**20)  # a file to a page that takes one
# Slow clients (evalsite/serverlimit.py): a request's line and headers must arrive within this many seconds, its
# body within as long again plus a second per HTTP_BODY_MIN_BYTES_PER_SECOND bytes; later it gets 408.
HTTP_READ_TIMEOUT_SECONDS = env.number("HTTP_READ_TIMEOUT_SECONDS", 20.0, minimum=1.0)
HTTP_BODY_MIN_BYTES_PER_SECOND = env.number("HTTP_BODY_MIN_BYTES_PER_SECOND", 1024.0, minimum=1.0)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES  # the form fields of a request, files not counted
FILE_UPLOAD_MAX_MEMORY_SIZE = 2621440  # Django's default: larger bodies and files are spooled to disk

# --- the client's address (evalsite/clientaddr.py): X-Forwarded-For is read only from these proxies
# (addresses or networks, e.g. 172.16.0.0/12 for a proxy on the Docker host); empty = no proxy, the
# connection's own address is the client's and the header is ignored.
TRUSTED_PROXIES = env.strings("TRUSTED_PROXIES")
try:
    parse_networks(TRUSTED_PROXIES)
except ValueError as _exc:
    raise ImproperlyConfigured(f"TRUSTED_PROXIES: {_exc}") from None

# --- login throttling (django-axes): a username + address pair is locked out after this many failures in a
# row; a browser that has logged in as that user before (a signed device cookie) has its own count, so
# failures from elsewhere never lock its owner out (evalsite/lockout.py)
AXES_FAILURE_LIMIT = env.integer("LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env.number("LOGIN_LOCKOUT_MINUTES", 15.0, minimum=0.01))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "evalsite.lockout.locked_out"  # 429, the wait and why
AXES_WHITELIST_CALLABLE = "evalsite.lockout.known_device"
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]  # the address evalsite.clientaddr settled, never a header
AXES_VERBOSE = False

# --- limits by client address, by study and for the whole site (docs/operations.md, "Abuse limits");
# 0 turns a limit off. Per study (the study form): new participants a minute, LLM calls a minute.
NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE = env.integer("NEW_PARTICIPANTS_PER_ADDRESS_PER_MINUTE", 5, minimum=0)
CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE = env.integer("CHAT_MESSAGES_PER_ADDRESS_PER_MINUTE", 60, minimum=0)
# The operator's cost guard: LLM calls of the live chat (replies, memory updates) in any 60 s, all studies.
LLM_CALLS_PER_MINUTE = env.integer("LLM_CALLS_PER_MINUTE", 600, minimum=0)
# PROLIFIC_API_TOKEN and PROLIFIC_API_URL (above, with the prolific app's settings) also check the submission in a
# worker's link with Prolific's API before a participant is made (studies/prolific.py).
# Power simulations (reports/planning.py, runtime jobs of lane "plan"): each ended at this CPU budget (of the thread
# that runs it); at most PLAN_QUEUE queued or running on the site, more are refused.
PLAN_CPU_SECONDS = env.integer("PLAN_CPU_SECONDS", 300, minimum=5)
PLAN_QUEUE = env.integer("PLAN_QUEUE", 3, minimum=1)

# --- static files
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {
        "handlers": ["console"],
        "level": env.choice("LOG_LEVEL", "INFO", ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]),
    },
    # axes logs every successful login at INFO; its lockouts are WARNING
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
    },
}
