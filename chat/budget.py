"""The cost guard: how many LLM calls the live chat may make in any minute, for the whole site and per study.

Two ceilings, both counted in the shared cache (infra/ratelimit.py, so every web process and Celery worker
counts together): ``settings.LLM_CALLS_PER_MINUTE``, the operator's, over every study; and
``Study.max_llm_calls_per_minute``, the researcher's, over one study's chats (empty: only the site's).
Every LLM call of a reply, a per-turn memory update or an end-of-session memory update takes a slot first
(:func:`acquire`, run by the arm's LLM wrapper that ``chat.arms.build_arm`` makes); a call that finds no
slot waits for one, up to ``wait`` seconds, then :class:`CallLimitReached` is raised and nothing is called
or recorded (the reply job waits in the queue and tries again; a memory update retries later).

So that the database does not fill with messages that then wait, a worker's message is refused while the
ceiling is reached (:func:`has_room`, in ``chat.turns.post_user_message``), with :data:`BUSY_TEXT`: the
message is not stored and goes back into the worker's text box. A quality-control arm makes no LLM call and
is never refused. Researcher-started jobs (readiness checks, automatic evaluation) are not counted: nobody
anonymous can start them, and their cost is chosen when they are started.
"""

from __future__ import annotations

import time

from django.conf import settings

from infra.ratelimit import Window
from studies.models import Study

SITE = Window("llm-calls")
STUDY = Window("llm-calls-study")
SITE_KEY = "site"
REPLY_WAIT_SECONDS = 10.0  # a reply's call waits this long for a slot, then the job goes back to the queue
MEMORY_WAIT_SECONDS = 60.0  # a memory update's call waits this long (a full window frees within a minute)
POLL_SECONDS = 0.5

BUSY_TEXT = (
    "Many people are chatting right now, so the chatbot cannot take your message yet. Please wait a minute, "
    "then send it again (it is back in the box)."
)


class CallLimitReached(Exception):
    """No LLM call slot freed up in time. Not an ``LLMError``: no call was made, so none is recorded.
    ``retry_after``: the least wait before the job that met it tries again (set by the reply)."""

    retry_after: float | None = None


def site_limit() -> int:
    return int(getattr(settings, "LLM_CALLS_PER_MINUTE", 0) or 0)


def study_limit(study: Study) -> int:
    return int(study.max_llm_calls_per_minute or 0)


def has_room(study: Study) -> bool:
    """Whether the site's and the study's ceilings leave room for a call now."""
    return SITE.has_room(SITE_KEY, site_limit()) and STUDY.has_room(str(study.pk), study_limit(study))


def try_acquire(study_id: int, per_study: int) -> bool:
    """Take a slot in both windows, or in neither."""
    ticket = STUDY.take(str(study_id), per_study)
    if ticket is None:
        return False
    if SITE.hit(SITE_KEY, site_limit()):
        return True
    STUDY.give_back(ticket)
    return False


def acquire(study_id: int, per_study: int, *, wait: float) -> None:
    """Take a slot for one LLM call, waiting up to ``wait`` seconds; :class:`CallLimitReached` otherwise."""
    end = time.monotonic() + wait
    while not try_acquire(study_id, per_study):
        if time.monotonic() >= end:
            which = (
                f"{site_limit()} a minute for the site"
                if not SITE.has_room(SITE_KEY, site_limit())
                else (f"{per_study} a minute for this study")
            )
            raise CallLimitReached(f"the LLM call limit ({which}) is reached")
        time.sleep(POLL_SECONDS)
