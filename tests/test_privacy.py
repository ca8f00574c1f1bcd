"""Privacy by default (issue 26, docs/privacy.md): pseudonyms in every export and report, the raw ID for the study's
owner only, a worker deleted everywhere with an audit record, and each study's retention period.

The data is made the way workers make it: two workers enter by the Prolific link, consent, chat with a scripted LLM
(jobs inline), end and rate their sessions; a memory-update arm's snapshot feeds an annotation queue that an
annotator labels. Each answers a free-text question before the first session, and has two Prolific submissions. The deletion test
then reads every table of the database, row by row, for the deleted worker's Prolific ID and for what they wrote,
and finds the other worker's (so the search itself is shown to work); the retention test does the same after the
sweep."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from annotation import exports as annotation_exports
from annotation import services
from annotation.models import Item, Label, Queue
from annotation.sources import pull_from_study
from chat import assignment, turns
from chat.forms import field_name
from chat.models import (
    ChatSession,
    Episode,
    LLMCallRecord,
    MemorySnapshot,
    Message,
    ProbeResult,
    Rating,
    SideBySideVote,
)
from chat.privacy import sweep_retention
from chat.tests.conftest import enter
from judges.models import BlindingBreach, JudgeScore
from judges.models import Judge as AutoJudge
from pairwise.models import Comparison, Judge, Judgement, Vote
from prolific.models import Submission, Wave, WebhookEvent
from prolific.services import apply_status, handle_event, remember_event
from reports.exports import export_lines
from reports.queries import study_ratings_frame
from studies.audit import PrivacyEvent
from studies.models import Arm, Participant, Study
from studies.questions import Answer, Question

pytestmark = pytest.mark.django_db(transaction=True)

# What each worker writes: words found nowhere else, so a hit anywhere is their data.
SAID = {
    "PIDALICE5f3a9c": "My hedgehog Quillington lives in Tromsofjord",
    "PIDBOB77e21d": "My parrot Featherbyx sings in Oaxacantla",
}
# What a probe's answer, a judge's output and a blinding flag's excerpt of each worker's session say (rows made by the
# apps above chat, deleted with the worker): found nowhere else either.
ABOUT = {"PIDALICE5f3a9c": "Prickleworth answered the probe", "PIDBOB77e21d": "Squawkington answered the probe"}
PAIRS = [{"i": 0, "j": 0, "m": "Has a hedgehog", "s": "Hedgehog is called Quillington", "op": "UPDATE"}]
# What each worker answers to the study's free-text question before the first session (studies/questions.py).
ANSWERED = {"PIDALICE5f3a9c": "I restore Bellweathering clocks", "PIDBOB77e21d": "I grow Muscadrine grapes"}


@pytest.fixture(autouse=True)
def _inline_jobs(settings: Any) -> None:
    settings.CHAT_JOB_MODE = "inline"
    settings.CHAT_RETRY_DELAYS = [0, 0, 0]
    settings.CHAT_TOKEN_FLUSH_SECONDS = 0


def rate_all(client: Client, session: ChatSession) -> None:
    data: dict[str, str] = {}
    for m in session.episode.participant.study.metrics.all():
        data[field_name(session.pk, m)], data[f"touched_{field_name(session.pk, m)}"] = "70", "1"
    assert client.post(f"/chat/{session.pk}/rate/", data).status_code == 302


def work(study: Study, pid: str) -> Participant:
    """A worker's first session through the real pages and workflows: two messages, the end, the ratings."""
    client = Client()
    participant = enter(client, study, pid)
    for question in Question.objects.filter(study=study, block="pre"):  # the block before the first session
        assert client.post(f"/s/{study.slug}/questions/pre/", {f"q{question.pk}": ANSWERED[pid]}).status_code == 302
    client.get(f"/s/{study.slug}/next/", follow=True)
    session = assignment.current_session(participant)
    assert session is not None
    client.get(f"/chat/{session.pk}/")
    turns.post_user_message(session, f"c1-{len(pid)}", SAID[pid])
    turns.post_user_message(session, f"c2-{len(pid)}", f"{SAID[pid]} again")
    assert client.post(f"/chat/{session.pk}/end/").status_code == 302
    rate_all(client, session)
    return participant


@pytest.fixture
def two_workers(study: Study, annotator: User) -> dict[str, Participant]:
    """Two workers' data in every table it reaches: chat, ratings, memory, LLM calls, an annotation queue with a label
    on each worker's item, and an admin log entry about each worker."""
    Arm.objects.filter(study=study, memory_system="none").update(active=False)  # both workers meet full_history
    Question.objects.create(study=study, block="pre", kind="text", text="What do you do at weekends?")
    workers = {pid: work(study, pid) for pid in SAID}
    # a memory-update arm's finished snapshot of each worker's session feeds the pairs queue (annotation.sources)
    update_arm = Arm.objects.create(study=study, name="Updates", memory_system="memory_update", llm_backend="scripted")
    for pid, participant in workers.items():
        episode = Episode.objects.create(participant=participant, arm=update_arm, index=2)
        chat = ChatSession.objects.create(episode=episode, index=1, simulated_start=timezone.now())
        Message.objects.create(session=chat, seq=1, speaker="user", text=SAID[pid] + " (second arm)")
        episode.memory_state = {"facts": [SAID[pid]]}
        episode.save()
        pairs = [{**PAIRS[0], "s": SAID[pid]}]
        MemorySnapshot.objects.create(
            session=chat, status="done", state={"facts": [SAID[pid]]}, trace={"operations": pairs}
        )
    queue = Queue.objects.create(name="ops", kind=Queue.Kind.PAIRS, study=study, labels_per_item=1, gold_min_votes=1)
    assert pull_from_study(queue) == 2
    for _ in range(2):
        a = services.claim_next_item(queue, annotator)
        assert a is not None
        services.submit_label(a.pk, annotator=annotator, op="FUSION", fused_text=a.item.payload["s"] + " (fused)")
    assert Label.objects.filter(item__queue=queue).count() == 2
    # a pairwise comparison (ACUTE-Eval) judged the two workers' episodes side by side, with a reason that quotes them
    alice_ep, bob_ep = (Episode.objects.get(participant=p, arm=update_arm) for p in workers.values())
    comparison = Comparison.objects.create(study=study, name="acute")
    judge = Judge.objects.create(comparison=comparison, source="prolific", external_id="prolific:JUDGE1")
    judged = Judgement.objects.create(
        judge=judge, position=1, left=alice_ep, right=bob_ep, left_arm=update_arm, right_arm=update_arm, status="done"
    )
    Vote.objects.create(judgement=judged, question="engaging", side="left", reason="Quillington the hedgehog was fun")
    # a persona probe, an automatic judge's score and a blinding flag of each worker's first session, quoting them
    auto_judge = AutoJudge.objects.create(study=study, name="judge", model="gpt-test")
    for pid, participant in workers.items():
        first = ChatSession.objects.filter(episode__participant=participant).order_by("episode__index", "index")[0]
        said = first.messages.filter(speaker="user").order_by("seq")[0]
        ProbeResult.objects.create(session=first, mode="inline", slot="pet", kind="current",
                                   question="What is my pet called?", answer=ABOUT[pid], correct=True)  # fmt: skip
        JudgeScore.objects.create(judge=auto_judge, session=first, metric="engaging", prompt="p.txt",
                                  prompt_sha256="0" * 64, model="gpt-test", score=70, raw=ABOUT[pid])  # fmt: skip
        BlindingBreach.objects.create(session=first, message=said, kind="name", term="x", excerpt=ABOUT[pid])
        SideBySideVote.objects.create(session=first, winner="a", reason=f"{ABOUT[pid]} and I liked it")
    # their Prolific submissions (prolific/): the one their link carried, and an earlier one read by a poll before
    # they arrived (no link to the participant: only its Prolific ID says whose it is), named by a webhook event
    wave = Wave.objects.create(study=study, number=1, prolific_study_id="st")
    for n, (pid, participant) in enumerate(workers.items()):
        Submission.objects.create(wave=wave, submission_id=f"SUBM-{pid}", prolific_pid=pid, participant=participant,
                                  status="AWAITING REVIEW")  # fmt: skip
        Submission.objects.create(wave=wave, submission_id=f"SUBX-{pid}", prolific_pid=pid, status="RETURNED")
        WebhookEvent.objects.create(signature=f"hmac-{n}", event_type="submission.status.change",
                                    resource_id=f"SUBM-{pid}")  # fmt: skip
    admin = User.objects.create_superuser("site-admin", password="pw-for-tests-only")
    for participant in workers.values():
        LogEntry.objects.create(
            user=admin,
            content_type=ContentType.objects.get_for_model(Participant),
            object_id=str(participant.pk),
            object_repr=repr(participant.external_id),  # as an older admin wrote it: the raw ID
            action_flag=CHANGE,
        )
    return workers


def rows_containing(needle: str) -> list[str]:
    """Every table of the database, every row, every column as text: where ``needle`` occurs."""
    hits = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                for value in row:
                    text = value.decode("utf-8", "replace") if isinstance(value, bytes | memoryview) else str(value)
                    if isinstance(value, dict | list):
                        text = json.dumps(value, ensure_ascii=False)
                    if needle in text:
                        hits.append(f"{table}: {text[:120]}")
    return hits


def every_export(study: Study) -> str:
    text = "".join(
        line
        for what in ("ratings", "transcripts", "memory", "llm-calls", "answers")
        for line in export_lines(study, what, "jsonl")
    )
    text += study_ratings_frame(study).to_csv()
    for queue in Queue.objects.filter(study=study):
        text += json.dumps(list(annotation_exports.gold_pairs(queue)))
    return text


def test_exports_and_reports_name_workers_by_a_pseudonym_never_the_raw_id(study: Study, two_workers: Any) -> None:
    text = every_export(study)
    for pid, participant in two_workers.items():
        assert pid not in text
        assert participant.pseudonym in text and participant.pseudonym.startswith("W-")
    # one map across the kinds: each file names the worker with the same pseudonym
    alice = two_workers["PIDALICE5f3a9c"]
    for what in ("ratings", "transcripts", "memory", "llm-calls", "answers"):
        assert alice.pseudonym in "".join(export_lines(study, what, "jsonl")), what
    assert alice.pseudonym in set(study_ratings_frame(study)["worker"])
    items = Item.objects.filter(queue__study=study)
    assert {i.meta["worker"] for i in items} == {p.pseudonym for p in two_workers.values()}


def test_the_same_prolific_worker_has_another_pseudonym_in_another_study(study: Study, researcher: User) -> None:
    other = Study.objects.create(name="Other", status=Study.Status.OPEN, created_by=researcher)
    a = enter(Client(), study, "PIDSAME")
    b = enter(Client(), other, "PIDSAME")
    assert a.pseudonym != b.pseudonym


def test_delete_participant_leaves_no_trace_in_any_table_or_export(study: Study, two_workers: Any) -> None:
    alice_pid, bob_pid = "PIDALICE5f3a9c", "PIDBOB77e21d"
    alice, bob = two_workers[alice_pid], two_workers[bob_pid]
    # the search finds both before (it is a search that can fail)
    for pid in (alice_pid, bob_pid):
        assert rows_containing(pid) and rows_containing(SAID[pid].split()[2])
        assert (
            len(rows_containing(ABOUT[pid])) == 4
        )  # the probe, the judge's score, the blinding flag, the side-by-side vote
    assert LLMCallRecord.objects.filter(session__episode__participant=alice).exists()
    assert rows_containing("Bellweathering")  # her answer to the question before the first session
    out = io.StringIO()
    call_command("delete_participant", study.slug, alice_pid, "--reason", "withdrew consent", stdout=out)
    assert f"Deleted worker {alice.pseudonym}" in out.getvalue()
    # the summary names what went above chat too: probes, judge scores, pairwise votes, annotation labels
    for went in ("1 probes", "1 judge scores", "1 blinding flags", "1 pairwise judgements", "1 pairwise votes",
                 "1 annotation items", "1 annotation labels"):  # fmt: skip
        assert went in out.getvalue(), went

    for needle in (
        alice_pid,
        SAID[alice_pid],
        "Quillington",
        "Tromsofjord",
        f"SUBM-{alice_pid}",
        "Bellweathering",
        ABOUT[alice_pid],
    ):
        assert rows_containing(needle) == [], needle
    assert Submission.objects.count() == 2  # Bob's two
    # a later poll of Prolific, or a webhook, about her submissions reads nothing of hers in again
    wave = Wave.objects.get(study=study)
    for sid in (f"SUBM-{alice_pid}", f"SUBX-{alice_pid}"):
        assert apply_status(wave, sid, alice_pid, "APPROVED").pk is None
    assert handle_event({"event_type": "submission.status.change", "resource_id": f"SUBM-{alice_pid}",
                         "status": "APPROVED"}) == "a deleted or pseudonymised worker's submission: ignored"  # fmt: skip
    assert remember_event("hmac-later", {"event_type": "submission.status.change", "resource_id": f"SUBX-{alice_pid}"})
    assert rows_containing(alice_pid) == [] and rows_containing(f"SUBM-{alice_pid}") == []
    assert Submission.objects.count() == 2
    assert not Participant.objects.filter(pk=alice.pk).exists()
    text = every_export(study)
    assert alice.pseudonym not in text and "Quillington" not in text
    # the other worker is untouched
    assert rows_containing(bob_pid) and rows_containing("Featherbyx") and rows_containing("Muscadrine")
    assert len(rows_containing(ABOUT[bob_pid])) == 4
    assert bob.pseudonym in text and Rating.objects.filter(session__episode__participant=bob).count() == 5
    assert Item.objects.filter(queue__study=study).count() == 1
    assert not Judgement.objects.exists() and not Vote.objects.exists()  # the pair showed her episode
    mine = {"session__episode__participant__pk": alice.pk}
    assert not ProbeResult.objects.filter(**mine).exists() and ProbeResult.objects.count() == 1  # bob's stays
    assert not JudgeScore.objects.filter(**mine).exists() and JudgeScore.objects.count() == 1
    assert BlindingBreach.objects.count() == 1
    # the audit: by pseudonym, with what went, never the raw ID
    event = PrivacyEvent.objects.get(action=PrivacyEvent.Action.DELETED)
    assert (event.pseudonym, event.study_slug, event.reason) == (alice.pseudonym, study.slug, "withdrew consent")
    assert event.counts["messages"] >= 5 and event.counts["ratings"] == 5 and event.counts["llm_calls"] >= 2
    assert event.counts["memory_snapshots"] == 2 and event.counts["admin_log_entries"] == 1
    assert event.counts["answers"] == 1 and "Bellweathering" not in "".join(export_lines(study, "answers", "csv"))
    above_chat = ("probes", "judge_scores", "blinding_flags", "pairwise_judgements", "pairwise_votes",
                  "annotation_items", "annotation_labels")  # fmt: skip
    assert {k: event.counts[k] for k in above_chat} == dict.fromkeys(above_chat, 1)
    assert event.counts["prolific_submissions"] == 2  # the one her link carried, the one read before she arrived


def test_delete_participant_command_errors_and_dry_run(study: Study, two_workers: Any) -> None:
    alice = two_workers["PIDALICE5f3a9c"]
    with pytest.raises(CommandError, match="No study"):
        call_command("delete_participant", "no-such-study", "x")
    with pytest.raises(CommandError, match="No worker"):
        call_command("delete_participant", study.slug, "PIDNOBODY")
    out = io.StringIO()
    call_command("delete_participant", study.slug, alice.pseudonym.lower(), "--dry-run", stdout=out)
    assert "Would delete worker" in out.getvalue() and "5 ratings" in out.getvalue()
    assert Participant.objects.filter(pk=alice.pk).exists() and not PrivacyEvent.objects.exists()


def test_only_the_owner_sees_a_raw_id_and_deletes_a_worker_from_the_quality_page(
    client: Client, study: Study, two_workers: Any, other: User
) -> None:
    alice = two_workers["PIDALICE5f3a9c"]
    study.shared_with.add(other)  # a researcher the study is shared with: sees the study, not the raw IDs
    raw_url = f"/studies/{study.slug}/workers/{alice.pseudonym}/raw-id/"
    delete_url = f"/studies/{study.slug}/workers/{alice.pseudonym}/delete/"
    client.force_login(other)
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert alice.pseudonym in page and "PIDALICE5f3a9c" not in page and "Show raw ID" not in page
    assert client.post(raw_url).status_code == 403
    assert client.post(delete_url, {"confirm": alice.pseudonym}).status_code == 403
    assert Participant.objects.filter(pk=alice.pk).exists() and not PrivacyEvent.objects.exists()

    client.force_login(study.created_by)
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert "Show raw ID" in page and "PIDALICE5f3a9c" not in page  # not until asked
    response = client.post(raw_url)
    assert response.status_code == 200 and "PIDALICE5f3a9c" in response.content.decode()
    assert PrivacyEvent.objects.get().action == PrivacyEvent.Action.REVEALED
    assert client.post(f"/studies/{study.slug}/workers/W-NOSUCH/raw-id/").status_code == 404
    assert client.get(raw_url).status_code == 405

    confirm = client.get(delete_url).content.decode()
    assert "5 ratings" in confirm and "Type" in confirm
    assert "1 probes" in confirm and "1 judge scores" in confirm and "1 pairwise votes" in confirm
    assert client.post(delete_url, {"confirm": "W-WRONG"}).status_code == 400
    assert Participant.objects.filter(pk=alice.pk).exists()
    response = client.post(delete_url, {"confirm": alice.pseudonym, "reason": "asked by email"}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200 and f"Worker {alice.pseudonym} was deleted everywhere" in page
    assert "1 pairwise votes" in page and "1 judge scores" in page and "1 probes" in page
    assert not Participant.objects.filter(pk=alice.pk).exists()
    event = PrivacyEvent.objects.get(action=PrivacyEvent.Action.DELETED)
    assert event.by == study.created_by and event.via == "quality page"
    assert 'id="privacy-audit"' in page and "asked by email" in page and "PIDALICE5f3a9c" not in page


def test_the_admin_shows_no_raw_id_and_cannot_delete_a_worker_without_the_audit(
    client: Client, study: Study, two_workers: Any
) -> None:
    alice = two_workers["PIDALICE5f3a9c"]
    client.force_login(User.objects.get(username="site-admin"))
    listing = client.get("/admin/studies/participant/").content.decode()
    assert alice.pseudonym in listing and "PIDALICE5f3a9c" not in listing
    change = client.get(f"/admin/studies/participant/{alice.pk}/change/").content.decode()
    assert "PIDALICE5f3a9c" not in change
    assert client.post(f"/admin/studies/participant/{alice.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Participant.objects.filter(pk=alice.pk).exists()


@pytest.mark.parametrize("action", ["pseudonymise", "delete_transcripts"])
def test_retention_sweep_drops_raw_ids_and_optionally_transcripts_of_workers_past_the_period(
    study: Study, two_workers: Any, action: str
) -> None:
    alice_pid, bob_pid = "PIDALICE5f3a9c", "PIDBOB77e21d"
    alice, bob = two_workers[alice_pid], two_workers[bob_pid]
    study.retention_days, study.retention_action = 30, action
    study.save()
    Participant.objects.filter(pk=alice.pk).update(last_seen_at=timezone.now() - timezone.timedelta(days=31))
    Participant.objects.filter(pk=bob.pk).update(last_seen_at=timezone.now() - timezone.timedelta(days=29))
    result = sweep_retention()
    assert (result.pseudonymised, result.transcripts_deleted) == (1, 1 if action == "delete_transcripts" else 0)
    assert rows_containing("PIDALICE5f3a9c") == []
    assert rows_containing("PIDBOB77e21d")  # not yet due
    # her Prolific submissions stay (status, decision) without her Prolific ID or their ids; a later poll of
    # Prolific or a webhook about them does not read the raw IDs in again
    assert rows_containing(f"SUBM-{alice_pid}") == [] and rows_containing(f"SUBX-{alice_pid}") == []
    kept = Submission.objects.filter(prolific_pid="").order_by("id")
    assert [s.status for s in kept] == ["AWAITING REVIEW", "RETURNED"]
    assert all(s.submission_id.startswith("erased-") for s in kept)
    assert kept[0].participant_id == alice.pk
    wave = Wave.objects.get(study=study)
    assert apply_status(wave, f"SUBM-{alice_pid}", alice_pid, "APPROVED").pk == kept[0].pk
    assert handle_event({"event_type": "submission.status.change", "resource_id": f"SUBX-{alice_pid}",
                         "status": "APPROVED"}) == "a deleted or pseudonymised worker's submission: ignored"  # fmt: skip
    assert remember_event("sig-later", {"event_type": "submission.status.change", "resource_id": f"SUBM-{alice_pid}"})
    assert rows_containing(alice_pid) == [] and Submission.objects.count() == 4
    assert Submission.objects.filter(prolific_pid=bob_pid).count() == 2  # Bob is not due yet
    alice.refresh_from_db()
    assert alice.pseudonymised_at is not None and alice.prolific_session_id == ""
    ratings = Rating.objects.filter(session__episode__participant=alice).count()
    assert ratings == 5  # ratings stay either way
    if action == "delete_transcripts":
        assert (
            Answer.objects.get(participant=alice).text == ""
            and "Muscadrine" in Answer.objects.get(participant=bob).text
        )
        for needle in ("Quillington", "Tromsofjord", "Bellweathering", "Prickleworth"):
            # a pairwise judge's reason is the judge's words (it stays, like the ratings); the worker's are gone
            assert [h for h in rows_containing(needle) if not h.startswith("pairwise_vote:")] == [], needle
        assert not Item.objects.filter(meta__worker=alice.pseudonym).exists()
        assert Episode.objects.filter(participant=alice).exclude(memory_state={}).count() == 0
    else:
        assert Message.objects.filter(session__episode__participant=alice).exists()
        assert alice.pseudonym in "".join(export_lines(study, "answers", "csv"))  # her answer, under the pseudonym
    assert alice.pseudonym in "".join(export_lines(study, "ratings", "jsonl"))
    event = PrivacyEvent.objects.get()
    assert event.pseudonym == alice.pseudonym and event.via == "retention sweep"
    assert sweep_retention().pseudonymised == 0  # once per worker
    out = io.StringIO()
    call_command("sweep_retention", stdout=out)
    assert "Pseudonymised 0 worker(s)" in out.getvalue()


def test_retention_sweep_drops_the_prolific_ids_of_pairwise_judges_past_the_period(
    study: Study, annotator: User, each_database: str
) -> None:
    """The ACUTE-Eval judges from a comparison's Prolific link are crowdworkers too: past the study's retention period
    after their last visit (arrival, pair shown or answered, finish) their Prolific IDs go like the workers'; their
    judgements and votes stay, under the exports' name for them. On SQLite and on PostgreSQL."""
    study.retention_days, study.retention_action = 30, "pseudonymise"
    study.save()
    worker = enter(Client(), study, "PIDWORKERJ0001")  # seen just now: not due
    arm_a, arm_b = Arm.objects.filter(study=study).order_by("id")[:2]
    left, right = (
        Episode.objects.get_or_create(participant=worker, arm=arm, defaults={"index": i})[0]
        for i, arm in ((1, arm_a), (2, arm_b))
    )
    comparison = Comparison.objects.create(study=study, name="acute", status=Comparison.Status.OPEN)
    long_ago, lately = timezone.now() - timezone.timedelta(days=31), timezone.now() - timezone.timedelta(days=29)

    def judge(pid: str, answered: Any, **fields: Any) -> Judge:
        made = Judge.objects.create(comparison=comparison, external_id=pid, created_at=long_ago, **fields)
        pair = Judgement.objects.create(judge=made, position=1, left=left, right=right, left_arm=arm_a,
                                        right_arm=arm_b, status="done", shown_at=long_ago, submitted_at=answered)  # fmt: skip
        Vote.objects.create(judgement=pair, question="engaging", side="left", reason="the left one asked more")
        return made

    gone = judge("PIDJUDGEGONE1", long_ago, source="prolific", prolific_study_id="STJUDGEGONE",
                 prolific_session_id="SEJUDGEGONE", completed_at=long_ago)  # fmt: skip
    judge("PIDJUDGEBACK1", lately, source="prolific")  # answered a pair 29 days ago: not due
    judge("", long_ago, source="annotator", user=annotator)  # a logged-in annotator: no Prolific ID
    for needle in ("PIDJUDGEGONE1", "STJUDGEGONE", "SEJUDGEGONE", "PIDJUDGEBACK1"):
        assert rows_containing(needle), needle  # the search finds them before

    result = sweep_retention()
    assert result.pseudonymised == 0  # the worker is not due
    for needle in ("PIDJUDGEGONE1", "STJUDGEGONE", "SEJUDGEGONE"):
        assert rows_containing(needle) == [], needle
    assert rows_containing("PIDJUDGEBACK1") and rows_containing("PIDWORKERJ0001")
    assert result.others == {"pairwise judges": 1}
    gone.refresh_from_db()
    assert gone.pseudonymised_at is not None and Vote.objects.filter(judgement__judge=gone).count() == 1
    event = PrivacyEvent.objects.get()
    assert (event.pseudonym, event.via, event.action) == (gone.pseudonym, "retention sweep", "pseudonymised")
    assert sweep_retention().others == {}  # once per judge
    out = io.StringIO()
    call_command("sweep_retention", stdout=out)
    assert "Pseudonymised 0 worker(s)" in out.getvalue() and "judge" not in out.getvalue()
    # the same Prolific ID opening the comparison's link again is a new judge
    from pairwise.services import join_crowd

    assert join_crowd(comparison, "PIDJUDGEGONE1").pk != gone.pk


def test_retention_is_set_on_the_edit_page_and_shown_on_the_quality_page(client: Client, study: Study) -> None:
    from studies.forms import StudyForm

    form = StudyForm(instance=study)
    assert "retention_days" in form.fields and "retention_action" in form.fields
    data = {**{k: v for k, v in form.initial.items() if v is not None and not isinstance(v, list)}}
    data.update(retention_days="90", retention_action="delete_transcripts")
    bound = StudyForm(data, instance=study)
    assert bound.is_valid(), bound.errors
    bound.save()
    study.refresh_from_db()
    assert (study.retention_days, study.retention_action) == (90, "delete_transcripts")
    client.force_login(study.created_by)
    page = client.get(f"/studies/{study.slug}/quality/").content.decode()
    assert "90 days after a worker's last visit" in page and "transcripts deleted" in page


def test_a_pseudonymised_judges_row_cannot_be_claimed_by_a_forged_prolific_id(study: Study) -> None:
    """A judge's Prolific ID is replaced at the retention sweep: the replacement is no Prolific ID a link can carry, so
    nobody opening the comparison's link with it (``erased:j<pk>``, or whatever it is) is bound to that judge and
    goes on with their judgements, votes and completion."""
    study.retention_days, study.retention_action = 30, "pseudonymise"
    study.save()
    comparison = Comparison.objects.create(study=study, name="acute", status=Comparison.Status.OPEN)
    long_ago = timezone.now() - timezone.timedelta(days=31)
    gone = Judge.objects.create(
        comparison=comparison, source="prolific", external_id="PIDJUDGEFORGED1", created_at=long_ago
    )
    assert sweep_retention().others == {"pairwise judges": 1}
    gone.refresh_from_db()
    client = Client()
    for pid in (f"erased:j{gone.pk}", gone.external_id):
        client.get(f"/p/{comparison.slug}/", {"PROLIFIC_PID": pid, "STUDY_ID": "st", "SESSION_ID": "se"})
        bound = client.session.get("memeval.judges", {}).get(str(comparison.pk))
        assert bound != gone.pk, pid


def test_a_judge_who_comes_back_while_the_retention_sweep_runs_keeps_the_prolific_id(
    study: Study, monkeypatch: pytest.MonkeyPatch, each_database: str
) -> None:
    """The sweep reads the judges due, then pseudonymises them one by one: a judge shown a pair in between was seen
    within the period and keeps the ID (each one is decided as it is written)."""
    study.retention_days, study.retention_action = 30, "pseudonymise"
    study.save()
    worker = enter(Client(), study, "PIDWORKERRACE01")
    arm_a, arm_b = Arm.objects.filter(study=study).order_by("id")[:2]
    left, right = (
        Episode.objects.get_or_create(participant=worker, arm=arm, defaults={"index": i})[0]
        for i, arm in ((1, arm_a), (2, arm_b))
    )
    comparison = Comparison.objects.create(study=study, name="acute", status=Comparison.Status.OPEN)
    long_ago = timezone.now() - timezone.timedelta(days=31)
    first, back = (
        Judge.objects.create(comparison=comparison, source="prolific", external_id=pid, created_at=long_ago)
        for pid in ("PIDJUDGERACE1", "PIDJUDGERACE2")
    )
    create = PrivacyEvent.objects.create

    def audit_then_the_second_judge_comes_back(**fields: Any) -> Any:
        if not Judgement.objects.filter(judge=back).exists():
            Judgement.objects.create(judge=back, position=1, left=left, right=right, left_arm=arm_a,
                                     right_arm=arm_b, shown_at=timezone.now())  # fmt: skip
        return create(**fields)

    monkeypatch.setattr(PrivacyEvent.objects, "create", audit_then_the_second_judge_comes_back)
    assert sweep_retention().others == {"pairwise judges": 1}
    first.refresh_from_db()
    back.refresh_from_db()
    assert first.pseudonymised_at is not None and first.external_id != "PIDJUDGERACE1"
    assert (back.pseudonymised_at, back.external_id) == (None, "PIDJUDGERACE2")
    assert list(PrivacyEvent.objects.values_list("pseudonym", flat=True)) == [first.pseudonym]


def test_a_judge_who_consented_within_the_retention_period_keeps_the_prolific_id(study: Study) -> None:
    """Consenting is a visit: a judge who arrived long ago and consented lately (no pair shown yet) was seen within the
    period."""
    study.retention_days, study.retention_action = 30, "pseudonymise"
    study.save()
    comparison = Comparison.objects.create(study=study, name="acute", status=Comparison.Status.OPEN)
    now = timezone.now()
    judge = Judge.objects.create(
        comparison=comparison, source="prolific", external_id="PIDJUDGECONSENT1",
        created_at=now - timezone.timedelta(days=31), consented_at=now - timezone.timedelta(days=1),
    )  # fmt: skip
    assert sweep_retention().others == {}
    judge.refresh_from_db()
    assert (judge.pseudonymised_at, judge.external_id) == (None, "PIDJUDGECONSENT1")
