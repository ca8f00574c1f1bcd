"""The automatic evaluation: loaders (GVD shipped, LoCoMo in its format), scores, report, CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from memory.__main__ import main
from memory.evaluation import (
    DatasetError,
    judge_answer,
    load_gvd,
    load_locomo,
    parse_label,
    percentile,
    run,
    token_f1,
)
from memory.llm import ScriptedLLM

LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog named Rex yesterday."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Congratulations on Rex!"},
            ],
            "session_2_date_time": "10:04 am on 20 May, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "Rex learned to sit."},
                {"speaker": "Bo", "dia_id": "D2:2", "text": "Good dog."},
            ],
        },
        "qa": [
            {"question": "What is the name of Ann's dog?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
            {"question": "When did Ann adopt Rex?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "What is Ann's cat called?", "adversarial_answer": "Rex", "category": 5},
        ],
    }
]


def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_small.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    return path


def test_the_gvd_loader_keeps_all_100_questions_and_strips_the_four_padded_names() -> None:
    dialogues = load_gvd()
    assert len(dialogues) == 15
    assert sum(len(d.questions) for d in dialogues) == 100
    names = {d.name for d in dialogues}
    assert {"Jason", "Linda", "Ivy", "Roland"} <= names
    assert all(name == name.strip() for name in names)
    jason = next(d for d in dialogues if d.name == "Jason")
    assert len(jason.sessions) == 10 and len(jason.questions) == 7


def test_the_replay_cli_finds_a_gvd_user_whose_key_has_spaces() -> None:
    out = io.StringIO()
    gvd = Path(__file__).resolve().parents[1] / "data" / "gvd" / "memory_bank_en.json"
    code = main(
        [
            "replay",
            str(gvd),
            "--arm",
            "none",
            "--backend",
            "scripted",
            "--dialogue",
            "Jason",
            "--max-sessions",
            "1",
            "--embedder",
            "hashing",
        ],
        out,
    )
    text = out.getvalue()
    assert code == 0 and "=== Jason session 1" in text
    assert text.count("--- Jason probe:") == 7  # none of Jason's probing questions is dropped


def test_locomo_sessions_keep_their_dates_and_categories(tmp_path: Path) -> None:
    (d,) = load_locomo(locomo_file(tmp_path))
    assert [s[0].isoformat() for s in d.sessions] == ["2023-05-08T13:56:00+00:00", "2023-05-20T10:04:00+00:00"]
    assert d.sessions[0][1][0] == {"speaker": "user", "text": "I adopted a dog named Rex yesterday."}
    assert [(q.category, q.answer) for q in d.questions] == [
        ("single-hop", "Rex"),
        ("temporal", "7 May 2023"),
        ("adversarial", "Rex"),
    ]


@pytest.mark.parametrize("bad", ['{"not": "a list"}', '[{"conversation": {}}]', "not json"])
def test_a_file_that_is_not_locomo_is_refused_with_its_name(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(DatasetError, match="bad.json"):
        load_locomo(path)


def test_token_f1_is_mem0s_set_based_f1() -> None:
    assert token_f1("Rex.", "rex") == 1.0
    assert token_f1("a dog named Rex", "Rex") == pytest.approx(2 * 0.25 * 1 / 1.25)
    assert token_f1("", "Rex") == 0.0 and token_f1("cat", "Rex") == 0.0


def test_the_judge_label_is_read_and_an_ambiguous_reply_counts_as_unjudged() -> None:
    assert parse_label('{"label": "CORRECT"}') == 1
    assert parse_label("It is WRONG.") == 0
    assert parse_label("CORRECT or WRONG") is None
    judge = ScriptedLLM(['The answer names the dog. {"label": "CORRECT"}'])
    assert judge_answer(judge, "q?", "Rex", "It is Rex")[0] == 1
    assert "Gold answer: Rex" in judge.calls[0][0]["content"]  # mem0's judge prompt, filled in


def test_percentiles_interpolate() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5 and percentile([], 0.5) is None


def test_an_eval_on_locomo_scores_every_category_and_leaves_adversarial_out_of_the_headline(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    result = run(
        "full_history",
        "locomo",
        locomo_file(tmp_path),
        backend="scripted",
        embedder="hashing",
        progress=lambda done, total, _msg: seen.append((done, total)),
    )
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == [1, 2, 3, 4, 5]
    assert result["questions"] == 3 and result["overall"]["n"] == 2
    assert set(result["categories"]) == {"single-hop", "temporal", "adversarial"}
    assert result["excluded_from_overall"] == ["adversarial"]
    assert result["judge"]["stand_in"] is True
    json.dumps(result)


def test_an_answer_that_names_the_gold_scores_with_a_real_judge(tmp_path: Path, monkeypatch: Any) -> None:
    import memory.llm as llm_module

    def fake_make_llm(backend: str, model: str = "", **options: Any) -> ScriptedLLM:
        if model == "judge":
            return ScriptedLLM(
                lambda m: (
                    '{"label": "CORRECT"}' if "Generated answer: Rex" in m[0]["content"] else '{"label": "WRONG"}'
                ),
                model="judge",
            )
        return ScriptedLLM(lambda m: "Rex" if "dog" in m[-1]["content"] else "I do not know", model="answerer")

    monkeypatch.setattr(llm_module, "make_llm", fake_make_llm)
    result = run(
        "none",
        "locomo",
        locomo_file(tmp_path),
        backend="openai",
        model="answerer",
        judge_model="judge",
        embedder="hashing",
    )
    assert result["categories"]["single-hop"] == {"n": 1, "f1": 1.0, "judge": 1.0, "judged": 1}
    assert result["categories"]["temporal"]["judge"] == 0.0
    assert result["judge"]["model"] == "judge" and result["model"] == "answerer"


def test_wrap_llm_sees_the_answer_model_and_the_judge_before_any_call(tmp_path: Path, monkeypatch: Any) -> None:
    import memory.llm as llm_module

    monkeypatch.setattr(llm_module, "make_llm", lambda backend, model="", **o: ScriptedLLM(model=model))

    class Counted:
        def __init__(self, inner: ScriptedLLM) -> None:
            self.inner, self.model, self.calls = inner, inner.model, 0

        def complete(self, messages: Any, **kw: Any) -> Any:
            self.calls += 1
            return self.inner.complete(messages, **kw)

    wrapped: list[Counted] = []

    def wrap(llm: Any) -> Any:
        wrapped.append(Counted(llm))
        return wrapped[-1]

    result = run(
        "none", "locomo", locomo_file(tmp_path), backend="openai", model="answerer", judge_model="judge",
        embedder="hashing", wrap_llm=wrap,
    )  # fmt: skip
    assert [(w.model, w.calls > 0) for w in wrapped] == [("answerer", True), ("judge", True)]
    assert result["model"] == "answerer"


def test_the_eval_cli_prints_a_complete_report_for_mem0_on_gvd() -> None:
    out = io.StringIO()
    code = main(
        [
            "eval",
            "mem0",
            "--dataset",
            "gvd",
            "--backend",
            "scripted",
            "--embedder",
            "hashing",
            "--quiet",
            "--dialogue",
            "Jason",
            "--dialogue",
            "Ivy",
        ],
        out,
    )
    text = out.getvalue()
    assert code == 0
    for expected in (
        "# mem0 on gvd",
        "| temporal |",
        "| user-fact |",
        "**overall**",
        "tokens per turn",
        "memory update p50",
    ):
        assert expected in text


def test_the_eval_cli_refuses_locomo_without_a_path_and_an_unknown_dialogue(capsys: Any) -> None:
    assert main(["eval", "none", "--dataset", "locomo", "--backend", "scripted"], io.StringIO()) == 2
    assert "CC BY-NC" in capsys.readouterr().err
    assert (
        main(["eval", "none", "--dataset", "gvd", "--backend", "scripted", "--dialogue", "Nobody"], io.StringIO()) == 2
    )
    assert "Nobody" in capsys.readouterr().err


def test_the_eval_cli_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    main(
        [
            "eval",
            "qc",
            "--dataset",
            "gvd",
            "--backend",
            "scripted",
            "--embedder",
            "hashing",
            "--quiet",
            "--dialogue",
            "Leo",
            "--format",
            "json",
            "--out",
            str(out),
        ],
        io.StringIO(),
    )
    result = json.loads(out.read_text())
    assert result["arm"] == "qc" and result["questions"] == 7 and len(result["items"]) == 7
