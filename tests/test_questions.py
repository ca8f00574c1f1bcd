"""Questions beyond the sliders (issue 26, item 4; studies/questions.py, chat/questionnaire.py): a block before the
first session, a comprehension check that must be passed to start (tries, then stop or continue), a block after the
last session; answers validated on the server, stored per worker, on the episode page and in the exports (by
pseudonym); the researcher's editor (htmx) frozen once a worker has answered; a preview records nothing."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat import assignment
from chat.quality import study_quality
from chat.tests.conftest import enter, rate_all, say
from prolific.services import suggested
from reports.exports import export_lines
from studies import questions
from studies.forms import StudyForm
from studies.models import Participant, Study
from studies.questions import Answer, ComprehensionAttempt, Question

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0


SECRET_TEXT = "I walk my greyhound Zephyrine every morning"


@pytest.fixture
def qstudy(study: Study) -> Study:
    """The test study, one episode of 2 sessions, with a block before (choice, optional Likert, capped text), a
    two-question comprehension check (3 tries) and a block after (optional text)."""
    study.episodes_per_worker = 1
    study.save()
    make = Question.objects.create
    make(
        study=study,
        block="pre",
        kind="choice",
        text="How often do you use chatbots?",
        choices=["Never", "Weekly", "Daily"],
        order=0,
    )
    make(
        study=study,
        block="pre",
        kind="likert",
        text="I enjoy chatting.",
        choices=questions.LIKERT_LABELS[5],
        required=False,
        order=1,
    )
    make(study=study, block="pre", kind="text", text="What do you do in the morning?", max_chars=60, order=2)
    make(
        study=study, block="check", kind="choice", text="How many sessions?", choices=["One", "Two"], correct=1, order=0
    )
    make(
        study=study,
        block="check",
        kind="choice",
        text="What do you rate?",
        choices=["The bot", "Yourself"],
        correct=0,
        order=1,
    )
    make(study=study, block="post", kind="text", text="Any comments?", required=False, max_chars=500, order=0)
    return study


def q(study: Study, block: str, n: int) -> Question:
    return questions.block_questions(study, block)[n]


def name(question: Question) -> str:
    return f"q{question.pk}"


def answer_pre(client: Client, study: Study) -> Any:
    return client.post(
        f"/s/{study.slug}/questions/pre/", {name(q(study, "pre", 0)): "2", name(q(study, "pre", 2)): SECRET_TEXT}
    )


def check(client: Client, study: Study, first: str, second: str) -> Any:
    return client.post(
        f"/s/{study.slug}/check/", {name(q(study, "check", 0)): first, name(q(study, "check", 1)): second}
    )


def chat_through(client: Client, participant: Participant) -> None:
    """Every session: a message, end, rate."""
    while (session := assignment.current_session(participant)) is not None:
        assert client.get(f"/s/{participant.study.slug}/next/", follow=True).status_code == 200
        client.get(f"/chat/{session.pk}/")
        say(session, "Hello there")
        assert client.post(f"/chat/{session.pk}/end/").status_code == 302
        assert rate_all(client, session).status_code == 302


def test_a_worker_answers_before_fails_then_passes_the_check_chats_and_answers_after(
    client: Client, qstudy: Study
) -> None:
    study = qstudy
    p = enter(client, study, "PIDQUESTIONS1")
    response = client.get(f"/s/{study.slug}/next/")
    assert response.status_code == 302 and response["Location"] == f"/s/{study.slug}/questions/pre/"
    page = client.get(response["Location"])
    assert page.status_code == 200 and "<title>Before you start · Chatbot study</title>" in page.content.decode()
    # the check and the sessions wait for the block before
    assert client.get(f"/s/{study.slug}/check/")["Location"] == f"/s/{study.slug}/next/"

    # bad input: a forged option, a required text left out, an optional Likert forged, then a text over its cap
    bad = client.post(f"/s/{study.slug}/questions/pre/", {name(q(study, "pre", 0)): "9", name(q(study, "pre", 1)): "x"})
    text = bad.content.decode()
    assert bad.status_code == 400 and text.count("That is not one of the options") == 2
    assert "Please answer this question." in text and "nothing you wrote was lost" in text
    long = "word " * 20
    bad = client.post(
        f"/s/{study.slug}/questions/pre/", {name(q(study, "pre", 0)): "1", name(q(study, "pre", 2)): long}
    )
    text = bad.content.decode()
    assert bad.status_code == 400 and "at most 60 characters (it has 99)" in text
    assert long.strip() in text and 'value="1" checked' in text  # what the worker wrote and chose is kept
    assert not Answer.objects.exists()

    response = answer_pre(client, study)
    assert response.status_code == 302 and response["Location"] == f"/s/{study.slug}/next/"
    stored = {a.question.text: (a.choice, a.text) for a in questions.answers_of(p)}
    assert stored == {"How often do you use chatbots?": (2, "Daily"), "I enjoy chatting.": (None, ""),
                      "What do you do in the morning?": (None, SECRET_TEXT)}  # fmt: skip
    assert answer_pre(client, study)["Location"] == f"/s/{study.slug}/next/"  # a second post changes nothing
    assert Answer.objects.count() == 3

    assert client.get(f"/s/{study.slug}/next/")["Location"] == f"/s/{study.slug}/check/"
    page = client.get(f"/s/{study.slug}/check/").content.decode()
    assert "<title>Check your understanding · Chatbot study</title>" in page and 'id="attempts-left">3<' in page
    assert study.worker_instructions.split(".")[0] in page  # the instructions are on the page
    # an answer left out or forged is not a try
    assert check(client, study, "1", "").status_code == 400
    assert check(client, study, "1", "5").status_code == 400
    assert not ComprehensionAttempt.objects.exists()
    # a wrong try, then the right answers
    assert check(client, study, "0", "0")["Location"] == f"/s/{study.slug}/check/"
    page = client.get(f"/s/{study.slug}/check/").content.decode()
    assert 'id="check-retry"' in page and 'id="attempts-left">2<' in page
    assert client.get(f"/s/{study.slug}/next/")["Location"] == f"/s/{study.slug}/check/"  # no session yet
    p.refresh_from_db()
    assert p.started_at is None and not p.episodes.exists()
    assert check(client, study, "1", "0")["Location"] == f"/s/{study.slug}/next/"
    assert [(t.number, t.passed) for t in p.comprehension_attempts.all()] == [(1, False), (2, True)]
    assert "/chat/" in client.get(f"/s/{study.slug}/next/")["Location"]

    chat_through(client, p)
    assert client.get(f"/s/{study.slug}/next/")["Location"] == f"/s/{study.slug}/questions/post/"
    assert client.get(f"/s/{study.slug}/done/")["Location"] == f"/s/{study.slug}/next/"  # no code before the block
    page = client.get(f"/s/{study.slug}/questions/post/").content.decode()
    assert "<title>A few last questions · Chatbot study</title>" in page and "(optional)" in page
    assert client.post(f"/s/{study.slug}/questions/post/", {name(q(study, "post", 0)): ""}).status_code == 302
    done = client.get(f"/s/{study.slug}/next/", follow=True).content.decode()
    assert study.completion_code in done
    p.refresh_from_db()
    assert p.completed_at is not None and Answer.objects.filter(participant=p).count() == 4

    # the episode page shows the worker's answers and tries
    client.force_login(study.created_by)
    episode = p.episodes.get()
    page = client.get(reverse("studies:episode", args=[study.slug, episode.pk])).content.decode()
    assert 'id="worker-answers"' in page and SECRET_TEXT in page and "Daily" in page
    assert 'try 1 <span class="error">failed</span>; try 2 <strong>passed</strong>' in page

    # the export: by pseudonym, a README header naming the questions, every answer and every try
    lines = list(export_lines(study, "answers", "csv"))
    n = int(next(csv.reader([lines[0]]))[0].split()[1])
    assert "questions (comprehension check: 3 tries, then stop):" in "".join(lines[:n])
    assert "check-1 [choice]: How many sessions? — 1. One | 2. Two (right)" in "".join(lines[:n])
    rows = list(csv.DictReader(io.StringIO("".join(lines[n:]))))
    assert {r["worker"] for r in rows} == {p.pseudonym} and "PIDQUESTIONS1" not in "".join(lines)
    assert [(r["question"], r["option"], r["answer"]) for r in rows if r["block"] == "pre"] == [
        ("pre-1", "3", "Daily"), ("pre-2", "", ""), ("pre-3", "", SECRET_TEXT)]  # fmt: skip
    tries = [(r["attempt"], r["question"], r["correct"], r["attempt_passed"]) for r in rows if r["block"] == "check"]
    assert tries == [("1", "check-1", "False", "False"), ("1", "check-2", "True", "False"),
                     ("2", "check-1", "True", "True"), ("2", "check-2", "True", "True")]  # fmt: skip
    assert [r["question"] for r in rows if r["block"] == "post"] == ["post-1"]
    jsonl = [json.loads(line) for line in export_lines(study, "answers", "jsonl")]
    assert jsonl[0]["header"]["questions"]["items"][3]["right_option"] == 2 and len(jsonl) == 1 + len(rows)
    assert client.get(reverse("reports:study_data_export", args=[study.slug, "answers", "csv"])).status_code == 200


def test_a_worker_who_fails_every_try_cannot_continue_and_is_told_to_return_the_study(
    client: Client, qstudy: Study
) -> None:
    study = qstudy
    study.comprehension_attempts = 2
    study.save()
    p = enter(client, study, "PIDFAILS")
    answer_pre(client, study)
    assert check(client, study, "0", "0")["Location"] == f"/s/{study.slug}/check/"
    assert check(client, study, "0", "1")["Location"] == f"/s/{study.slug}/next/"
    assert client.get(f"/s/{study.slug}/next/")["Location"] == f"/s/{study.slug}/stopped/"
    page = client.get(f"/s/{study.slug}/stopped/").content.decode()
    assert "<title>You cannot continue · Chatbot study</title>" in page
    assert "not right in 2 tries" in page and "Please return your submission on Prolific" in page
    assert study.completion_code not in page
    # nothing goes on: no further try, no session, no place taken
    assert check(client, study, "1", "0")["Location"] == f"/s/{study.slug}/next/"
    assert client.get(f"/s/{study.slug}/next/")["Location"] == f"/s/{study.slug}/stopped/"
    p.refresh_from_db()
    assert p.comprehension_attempts.count() == 2 and p.started_at is None and not p.episodes.exists()
    # recorded for the quality page and the Prolific review
    record = next(r for r in study_quality(study) if r.participant.pk == p.pk)
    assert "failed the comprehension check (2 of 2 tries)" in record.reasons()
    assert suggested(record, p) == (record.reasons(), "FAILED_CHECK")  # the Prolific review's suggestion
    client.force_login(study.created_by)
    assert "failed the comprehension check" in client.get(f"/studies/{study.slug}/quality/").content.decode()


def test_with_continue_a_worker_goes_on_after_the_last_failed_try_and_is_marked(client: Client, qstudy: Study) -> None:
    study = qstudy
    study.comprehension_attempts, study.comprehension_fail_action = 1, "continue"
    study.save()
    p = enter(client, study, "PIDCONTINUES")
    answer_pre(client, study)
    check(client, study, "0", "1")
    assert "/chat/" in client.get(f"/s/{study.slug}/next/")["Location"]
    record = next(r for r in study_quality(study) if r.participant.pk == p.pk)
    assert "failed the comprehension check (1 of 1 try)" in record.reasons()


def test_the_researcher_edits_the_blocks_with_htmx_until_a_worker_answers(
    client: Client, study: Study, other: User
) -> None:
    url = reverse("studies:question_add", args=[study.slug])
    htmx = {"HTTP_HX_REQUEST": "true"}
    client.force_login(study.created_by)
    page = client.get(reverse("studies:edit", args=[study.slug])).content.decode()
    assert 'id="questions"' in page and 'hx-post="' + url in page
    base = {"block": "pre", "kind": "choice", "text": "Your age group?", "options": "18-30\n31-50\n51+",
            "required": "on", "max_chars": "1000", "points": "5"}  # fmt: skip
    response = client.post(url, base, **htmx)
    assert response.status_code == 200 and "Your age group?" in response.content.decode()
    assert 'id="questions"' in response.content.decode() and "<html" not in response.content.decode()  # the partial
    added = Question.objects.get(study=study)
    assert (added.block, added.labels, added.required, added.correct) == ("pre", ["18-30", "31-50", "51+"], True, None)
    # clear errors: one option only, a check without its right answer, a Likert of 2 points
    for bad, error in [
        ({"options": "Only one"}, "at least two options"),
        ({"block": "check", "right_option": ""}, "number of the right option"),
        ({"block": "check", "right_option": "4"}, "number of the right option"),
        ({"kind": "likert", "options": "Yes\nNo"}, "3 to 11 labelled points"),
    ]:
        response = client.post(url, {**base, **bad}, **htmx)
        assert response.status_code == 200 and error in response.content.decode(), bad  # htmx swaps a 200 only
        assert Question.objects.filter(study=study).count() == 1
    response = client.post(
        url, {**base, "kind": "likert", "options": "", "points": "7", "text": "Chatbots help me."}, **htmx
    )
    assert Question.objects.get(text="Chatbots help me.").labels == questions.LIKERT_LABELS[7]
    response = client.post(url, {**base, "block": "check", "right_option": "2", "text": "Pick the middle"})
    assert response.status_code == 302 and Question.objects.get(text="Pick the middle").correct == 1  # without htmx
    # a viewer changes nothing
    study.viewers.add(other)
    client.force_login(other)
    assert client.post(url, base, **htmx).status_code == 403
    assert client.post(reverse("studies:question_delete", args=[study.slug, added.pk]), **htmx).status_code == 403
    # frozen once a worker has answered (a preview does not count)
    client.force_login(study.created_by)
    assert client.post(reverse("studies:question_delete", args=[study.slug, added.pk]), **htmx).status_code == 200
    assert not Question.objects.filter(pk=added.pk).exists()
    worker = Client()
    enter(worker, study, "PIDANSWERS")
    likert = Question.objects.get(text="Chatbots help me.")
    assert worker.post(f"/s/{study.slug}/questions/pre/", {}).status_code == 400  # nothing valid: not an answer
    assert not questions.frozen(study)
    assert worker.post(f"/s/{study.slug}/questions/pre/", {name(likert): "6"}).status_code == 302
    assert questions.frozen(study)
    response = client.post(url, base, **htmx)
    assert (
        "cannot change any more" in response.content.decode() and 'id="question-add"' not in response.content.decode()
    )
    target = Question.objects.get(text="Pick the middle")
    response = client.post(reverse("studies:question_delete", args=[study.slug, target.pk]), **htmx)
    assert "cannot change any more" in response.content.decode() and Question.objects.filter(pk=target.pk).exists()
    assert not Question.objects.filter(text="Your age group?").exists()
    form = StudyForm(instance=study)
    data = {k: v for k, v in form.initial.items() if v is not None and not isinstance(v, list)}
    bound = StudyForm({**data, "comprehension_attempts": "5"}, instance=study)
    assert not bound.is_valid() and "cannot change any more" in str(bound.errors["comprehension_attempts"])


def test_a_preview_walks_the_question_pages_and_records_nothing(client: Client, qstudy: Study) -> None:
    study = qstudy
    study.status = Study.Status.DRAFT
    study.save()
    client.force_login(study.created_by)
    client.post(reverse("studies:preview", args=[study.slug]))
    client.post(reverse("studies:consent", args=[study.slug]), {"agree": "yes"})
    assert client.get(f"/s/{study.slug}/next/")["Location"] == f"/s/{study.slug}/questions/pre/"
    page = client.get(f"/s/{study.slug}/questions/pre/").content.decode()
    assert 'id="preview-banner"' in page
    answer_pre(client, study)
    assert check(client, study, "1", "0")["Location"] == f"/s/{study.slug}/next/"
    assert "/chat/" in client.get(f"/s/{study.slug}/next/")["Location"]
    assert not questions.frozen(study)  # a preview is no worker: the questions stay editable
    assert len(list(export_lines(study, "answers", "jsonl"))) == 1  # the header only
    client.post(reverse("studies:preview_end", args=[study.slug]))
    assert not Answer.objects.exists() and not ComprehensionAttempt.objects.exists()
