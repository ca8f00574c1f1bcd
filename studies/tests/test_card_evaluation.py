"""The offline card evaluation from the study page (chat/cardjobs.py): ``memory eval ARM --dataset cards`` on the
study's own card bank and event script, for each arm, as a job of the runtime (kind ``chat.card_evaluation``,
lane ``long``) with its progress; against the arm's endpoint (a fake OpenAI-compatible server here); resumable
(a run started again after one failed skips the cards that one finished, and a run taken over after its worker
died goes on from its own journal). The stand-ins (the scripted backend's echo, the fake server's replies) check
the plumbing and say nothing about any real model."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat import armjobs, cardjobs
from chat.models import ArmJob
from memory import cardeval
from memory.llm import LLM, LLMError
from memory.tests.fake_llm import fake_reply
from memory.tests.fake_openai import FaultyOpenAI
from runtime import kinds, leases
from runtime.models import Job
from studies.models import Study
from studies.tests.conftest import arm_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def rclient(client: Client, researcher: Any) -> Client:
    client.force_login(researcher)
    return client


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"


@pytest.fixture
def card_study(study: Study) -> Study:
    study.persona_cards = True
    study.save(update_fields=["persona_cards"])
    return study


def start_cards(client: Client, study: Study, capture: Any, **data: str) -> Any:
    with capture(execute=True):
        return client.post(reverse("studies:check_arms", args=[study.slug]), {"kind": "cards", **data}, follow=True)


def test_the_kind_is_declared_on_the_long_lane_with_the_evaluations_retry_policy() -> None:
    kind = kinds.get("chat.card_evaluation")
    assert kind.lane == "long" and kind.label == "offline card evaluation"
    assert kind.policy() == kinds.get("chat.evaluation").policy() == armjobs.arm_job_policy()


def test_the_card_evaluation_runs_for_each_arm_on_the_studys_cards_with_progress(
    rclient: Client, card_study: Study, django_capture_on_commit_callbacks: Any
) -> None:
    body = rclient.get(card_study.get_absolute_url()).content.decode()
    assert 'id="card-evaluation-form"' in body and "<th>Offline cards</th>" in body
    start_cards(rclient, card_study, django_capture_on_commit_callbacks, max_cards="2")
    runs = list(ArmJob.objects.filter(kind="cards").select_related("job", "arm").order_by("id"))
    assert [r.status for r in runs] == ["done", "done"], [r.error for r in runs]
    assert [r.job.kind for r in runs] == ["chat.card_evaluation"] * 2 and runs[0].job.lane == "long"
    script = card_study.persona_script()
    for run in runs:
        result = run.result
        assert result is not None and result["dataset"] == "cards" and result["arm"] == run.arm.memory_system
        assert result["cards"] == 2 and result["probes"] == len(result["items"]) > 0
        assert result["bank"]["sha256"] == card_study.persona_bank().sha256 and result["script"] == script.as_dict()
        assert run.done == run.total == 2 * script.sessions  # progress: sessions played and probed
        assert run.journal == []  # the finished run's probes are its result's items
        assert result["stand_in_model"] and result["resumed_cards"] == []
    none = next(r for r in runs if r.arm.memory_system == "none").result
    assert none["overall"]["deletion_honoured"] == 1.0  # nothing is stored, so nothing to forget
    body = rclient.get(card_study.get_absolute_url()).content.decode()
    assert "deletion honoured <strong>1.00</strong>" in body and "2 cards," in body
    assert "stand-in model: measures nothing" in body


def test_a_study_without_persona_cards_or_with_a_bad_count_is_refused_clearly(
    rclient: Client, study: Study, card_study: Study, django_capture_on_commit_callbacks: Any
) -> None:
    Study.objects.filter(pk=study.pk).update(persona_cards=False)
    response = rclient.post(reverse("studies:check_arms", args=[study.slug]), {"kind": "cards"})
    assert response.status_code == 400 and "needs a study with persona cards" in response.content.decode()
    Study.objects.filter(pk=study.pk).update(persona_cards=True)
    for bad in ("0", "²", "9" * 5000):
        response = rclient.post(reverse("studies:check_arms", args=[study.slug]), {"kind": "cards", "max_cards": bad})
        assert response.status_code == 400 and "Cards per arm must be a whole number" in response.content.decode()
    Study.objects.filter(pk=study.pk).update(card_script={"sessions": 2, "events": [{"session": 1, "op": "forget",
                                                                                     "slot": "pet"}]})  # fmt: skip
    response = rclient.post(reverse("studies:check_arms", args=[study.slug]), {"kind": "cards"})
    assert response.status_code == 400 and "cannot be played" in response.content.decode()
    assert not ArmJob.objects.filter(kind="cards").exists()


def reply(messages: list[dict[str, str]]) -> str:
    """The memory tasks as the fake LLM answers them; the judge's prompts get WRONG; replies the fake's."""
    if "Current fact:" in messages[-1]["content"] and '"label"' in messages[-1]["content"]:
        return '{"label": "WRONG"}'
    return fake_reply(messages)


def test_it_runs_against_the_arms_openai_compatible_endpoint(
    rclient: Client, card_study: Study, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with FaultyOpenAI(reply) as server:
        settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, settings.LLM_TIMEOUT_SECONDS = server.base_url, "k", 5
        card_study.arms.update(llm_backend="openai", llm_model="test-model")
        arm = card_study.arms.get(memory_system="full_history")
        start_cards(rclient, card_study, django_capture_on_commit_callbacks, max_cards="1", arm=str(arm.pk))
    run = ArmJob.objects.get(kind="cards")
    assert run.status == "done", run.error
    assert run.result["backend"] == "openai" and run.result["model"] == "test-model"
    assert not run.result["stand_in_model"] and not run.result["judge"]["stand_in"]
    assert len(server.log) >= run.result["probes"] and all(fault == "ok" for fault, _ in server.log)


def cards_played(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the cards the runs play from now on (memory.cardeval.run_card), in order."""
    calls: list[str] = []
    real = cardeval.run_card
    monkeypatch.setattr(cardeval, "run_card", lambda system, llm, plan, **kw: calls.append(plan.card.id)
                        or real(system, llm, plan, **kw))  # fmt: skip
    return calls


class FailAfterFirstCard:
    """Wraps the arms' model (through chat.armjobs.guard): once the journal holds a finished card, every call
    fails, as an endpoint that goes down half-way through a run."""

    down = False

    def __init__(self, llm: LLM) -> None:
        self.llm, self.model = llm, llm.model

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        if FailAfterFirstCard.down:
            raise LLMError("the endpoint went away")
        return self.llm.complete(*args, **kwargs)


def test_a_run_started_again_after_a_failure_skips_the_cards_it_finished_and_keeps_their_probes(
    rclient: Client,
    card_study: Study,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    arm = card_study.arms.get(memory_system="full_history")
    # what an uninterrupted run finds (the scripted stand-in is deterministic)
    clean = cardeval.run("full_history", card_study.persona_bank(), script=card_study.persona_script(),
                         model=arm.resolved_model, embedder="hashing", max_cards=2,
                         max_tokens=settings.LLM_MAX_TOKENS)  # fmt: skip
    flush = cardjobs.StoredJournal.flush

    def flush_then_fail(self: cardjobs.StoredJournal) -> None:
        flush(self)
        if self.finished_cards:
            FailAfterFirstCard.down = True

    monkeypatch.setattr(cardjobs.StoredJournal, "flush", flush_then_fail)
    monkeypatch.setattr(armjobs, "guard", lambda attempt, llm: FailAfterFirstCard(llm))
    monkeypatch.setattr(FailAfterFirstCard, "down", False)
    start_cards(rclient, card_study, django_capture_on_commit_callbacks, max_cards="2", arm=str(arm.pk))
    failed = ArmJob.objects.get(kind="cards")
    assert failed.status == "failed" and "the endpoint went away" in failed.error
    assert failed.kept_cards == 1 and [r["dialogue"] for r in failed.journal if r["kind"] == "card"] == ["c01"]
    body = rclient.get(card_study.get_absolute_url()).content.decode()
    assert "1 finished card kept: run it again to go on" in body

    monkeypatch.setattr(FailAfterFirstCard, "down", False)
    monkeypatch.setattr(cardjobs.StoredJournal, "flush", flush)
    calls = cards_played(monkeypatch)
    start_cards(rclient, card_study, django_capture_on_commit_callbacks, max_cards="2", arm=str(arm.pk))
    again = ArmJob.objects.filter(kind="cards").order_by("-id").first()
    assert again is not None and again.pk != failed.pk and again.status == "done", again.error
    assert calls == ["c02"]  # only the card the failed run had not finished is played
    assert again.result["resumed_cards"] == ["c01"]
    strip = ("seconds", "llm_calls", "resumed_cards")
    assert {k: v for k, v in again.result.items() if k not in strip} == {
        k: v for k, v in clean.items() if k not in strip
    }
    assert "kept from a stopped run" in rclient.get(card_study.get_absolute_url()).content.decode()


def test_a_run_whose_worker_died_goes_on_from_its_own_journal(
    rclient: Client,
    card_study: Study,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    arm = card_study.arms.get(memory_system="none")
    lost = arm_job(arm, "cards", status="running", attempts=1, done=3, total=6, started_at=leases.later(-120),
                   lease_until=leases.later(-60))  # fmt: skip
    lost.options = {"max_cards": 2}
    lost.save(update_fields=["options"])
    assert lost.job is not None and lost.job.kind == "chat.card_evaluation"
    # the first attempt finished card c01 before its worker died: its journal is on the record
    partial = cardjobs.StoredJournal(lost)
    with pytest.raises(LLMError):
        cardeval.run("none", card_study.persona_bank(), script=card_study.persona_script(), embedder="hashing",
                     model=arm.resolved_model, max_cards=2, max_tokens=settings.LLM_MAX_TOKENS, journal=partial,
                     wrap_llm=lambda llm: _fails_in_card(llm, partial))  # fmt: skip
    lost.refresh_from_db()
    assert lost.kept_cards == 1
    calls = cards_played(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):  # the jobs card's button (or the sweeper) takes it back
        rclient.post(reverse("studies:jobs_sweep", args=[card_study.slug]))
    lost.refresh_from_db()
    assert lost.status == "done" and lost.job is not None and lost.job.attempts == 2, lost.error
    assert calls == ["c02"] and lost.result["resumed_cards"] == ["c01"] and lost.result["cards"] == 2
    assert Job.objects.filter(kind="chat.card_evaluation").count() == 1


def _fails_in_card(llm: LLM, journal: cardjobs.StoredJournal) -> LLM:
    class Failing(FailAfterFirstCard):
        def complete(self, *args: Any, **kwargs: Any) -> Any:
            if journal.finished_cards:
                raise LLMError("the worker died")
            return self.llm.complete(*args, **kwargs)

    return Failing(llm)  # type: ignore[return-value]
