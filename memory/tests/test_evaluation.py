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
    render_markdown,
    run,
    token_f1,
)
from memory.llm import ScriptedLLM
from memory.tests.conftest import locomo_file


# A LoCoMo-format fixture written for these tests (the real file is CC BY-NC 4.0 and stays out of
# the repository): two named speakers, a shared image, every category, an int answer, a ";" answer.
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


def test_locomo_sessions_keep_their_dates_both_speakers_names_and_shared_images(tmp_path: Path) -> None:
    (d,) = load_locomo(locomo_file(tmp_path))
    assert [s[0].isoformat() for s in d.sessions] == ["2023-05-08T13:56:00+00:00", "2023-05-20T10:04:00+00:00"]
    assert d.speakers == ("Ann", "Bo")
    # as LoCoMo's replay writes a turn (task_eval/gpt_utils.py get_input_context): the name is kept
    assert d.sessions[0][1][0] == {"speaker": "user", "text": 'Ann said, "I adopted a dog named Rex yesterday."'}
    assert d.sessions[0][1][1]["speaker"] == "bot" and d.sessions[0][1][1]["text"].startswith('Bo said, "')
    # and a shared image by its caption
    assert (
        d.sessions[1][1][0]["text"] == 'Ann said, "Rex learned to sit." and shared a photo of a dog sitting on a rug.'
    )


def test_adversarial_questions_have_the_abstention_as_gold_and_the_trap_apart(tmp_path: Path) -> None:
    (d,) = load_locomo(locomo_file(tmp_path))
    assert [(q.category, q.answer) for q in d.questions[:3]] == [
        ("single-hop", "Rex"),
        ("temporal", "7 May 2023"),
        ("adversarial", "Not mentioned in the conversation"),
    ]
    adversarial = d.questions[2]
    assert adversarial.abstain and adversarial.trap == "Rex" and adversarial.qid == "locomo_0_qa2"
    # asked in the reference's two-option form, the order drawn reproducibly from the question's id
    assert adversarial.ask.startswith("What is Ann's cat called? Select the correct answer: (a) ")
    assert set(adversarial.options.values()) == {"Not mentioned in the conversation", "Rex"}
    assert load_locomo(locomo_file(tmp_path))[0].questions[2].ask == adversarial.ask
    assert d.questions[5].answer == "1"  # an int answer of the release, as text


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


def test_the_judge_verdict_is_read_from_its_json_and_never_from_words_in_the_text() -> None:
    assert parse_label('{"label": "CORRECT"}') == 1
    assert parse_label('The answer names the dog.\n```json\n{"label": "WRONG"}\n```') == 0
    # substring reading took these for verdicts: "incorrect" contains CORRECT
    assert parse_label("The generated answer is incorrect.") is None
    assert parse_label("It is WRONG.") is None and parse_label("CORRECT or WRONG") is None
    assert parse_label('{"label": "CORRECT"} on reflection {"label": "WRONG"}') == 0  # the last verdict
    judge = ScriptedLLM(['The answer names the dog. {"label": "CORRECT"}'])
    assert judge_answer(judge, "q?", "Rex", "It is Rex")[0] == 1
    assert "Gold answer: Rex" in judge.calls[0][0]["content"]  # mem0's judge prompt, filled in


def test_an_unreadable_verdict_counts_as_wrong_and_is_counted(tmp_path: Path, monkeypatch: Any) -> None:
    import memory.llm as llm_module

    verdicts = iter(["The answer is incorrect.", 'Names the dog. {"label": "CORRECT"}'] * 10)

    def fake_make_llm(backend: str, model: str = "", **options: Any) -> ScriptedLLM:
        if model == "judge":
            return ScriptedLLM(lambda m: next(verdicts), model="judge")
        return ScriptedLLM(lambda m: "Rex", model="answerer")

    monkeypatch.setattr(llm_module, "make_llm", fake_make_llm)
    result = run("none", "locomo", locomo_file(tmp_path), backend="openai", model="answerer", judge_model="judge",
                 embedder="hashing", max_questions=2)  # fmt: skip
    overall = result["overall"]
    # two answers judged: one verdict unreadable (WRONG, counted), one CORRECT: J = 1/2, both in the denominator
    assert overall["n"] == 2 and overall["judge"] == 0.5 and overall["judge_unparsed"] == 1
    assert result["judge"]["unparsed"] == 1
    assert "1 verdicts could not be read and count as WRONG" in render_markdown(result)


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
    assert seen[-1] == (8, 8) and [d for d, _ in seen] == list(range(1, 9))
    assert result["questions"] == 6 and result["overall"]["n"] == 5
    assert set(result["categories"]) == {"single-hop", "temporal", "adversarial", "multi-hop", "open-domain"}
    assert result["excluded_from_overall"] == ["adversarial"]
    assert result["judge"]["stand_in"] is True
    json.dumps(result)


def test_an_answer_that_names_the_gold_scores_with_a_real_judge(tmp_path: Path, monkeypatch: Any) -> None:
    import memory.llm as llm_module

    def fake_make_llm(backend: str, model: str = "", **options: Any) -> ScriptedLLM:
        if model == "judge":
            return ScriptedLLM(
                lambda m: (
                    '{"label": "CORRECT"}'
                    if "Gold answer: Rex\nGenerated answer: Rex" in m[0]["content"]
                    else '{"label": "WRONG"}'
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
    single = result["categories"]["single-hop"]
    assert (single["n"], single["f1"], single["locomo_f1"], single["judge"], single["judged"]) == (2, 0.5, 0.5, 0.5, 2)
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


# ------------------------------------------------------------------------------------ LoCoMo's scorer


@pytest.mark.parametrize(
    ("category", "prediction", "gold", "expected"),
    [
        # Worked by hand from LoCoMo's reference (task_eval/evaluation.py at 3eb6f2c) and checked against it.
        # Multiset, not set: "rex rex" has 1 of its 2 tokens in common: P 1/2, R 1, F1 2/3 (set F1 says 1).
        (4, "Rex Rex", "Rex", 2 / 3),
        # Porter stems: painting/paint, sunsets/sunset; "was" -> "wa", "she" stays: P 2/4, R 2/2 -> 2/3
        (4, "She was painting sunsets!", "sunset painting", 2 / 3),
        # articles and "and" dropped, punctuation and case ignored: "the the the running" is "run"
        (4, "The the the running", "Running", 1.0),
        # "On 7 May 2023." vs "7 May 2023": 3 of 4 tokens: P 3/4, R 1 -> 6/7
        (2, "On 7 May 2023.", "7 May 2023", 6 / 7),
        # multi-hop: gold parts pottery (1), painting (2/3: "painting and camping" -> paint camp), camping
        # (2/3), museum (0): mean 7/12
        (1, "pottery, painting and camping", "Pottery, painting, camping, museum", 7 / 12),
        # open-domain: the gold is cut at ";": "likely yes" vs "likely yes she loves books": P 2/5, R 1 -> 4/7
        (3, "Likely yes, she loves books", "Likely yes; since she collects classic children's books", 4 / 7),
        # adversarial: right when the answer abstains, whatever the trap
        (5, "That was not mentioned in our conversations.", "Rex", 1.0),
        (5, "No information available.", "Rex", 1.0),
        (5, "Rex", "Rex", 0.0),
        (4, "", "Rex", 0.0),
    ],
)
def test_locomo_f1_follows_the_reference(category: int, prediction: str, gold: str, expected: float) -> None:
    from memory.locomo import score

    assert score(category, prediction, gold) == pytest.approx(expected)


def test_a_two_option_reply_is_read_as_the_reference_reads_it() -> None:
    from memory.locomo import option_answer

    options = {"a": "Not mentioned in the conversation", "b": "Rex"}
    assert option_answer("a", options) == "Not mentioned in the conversation"
    assert option_answer("(b)", options) == "Rex"
    assert option_answer("(a) Not mentioned in the conversation", options) == "(a) not mentioned in the conversation"


def _answering(monkeypatch: Any, answer: Any) -> None:
    import memory.llm as llm_module

    monkeypatch.setattr(
        llm_module,
        "make_llm",
        lambda backend, model="", **o: ScriptedLLM(lambda m: answer(m[-1]["content"]), model=model),
    )


def test_an_arm_that_abstains_on_adversarial_questions_scores_1_and_one_that_takes_the_trap_0(
    tmp_path: Path, monkeypatch: Any
) -> None:
    def scores(reply: str) -> dict[str, Any]:
        _answering(monkeypatch, lambda question: reply)
        result = run("none", "locomo", locomo_file(tmp_path), backend="openai", model="m", embedder="hashing",
                     max_questions=3)  # fmt: skip
        (item,) = [i for i in result["items"] if i["category"] == "adversarial"]
        return item

    abstains = scores("That was not mentioned in the conversation.")
    trapped = scores("Her cat is called Rex.")
    assert (abstains["f1"], abstains["locomo_f1"]) == (1.0, 1.0)
    assert (trapped["f1"], trapped["locomo_f1"]) == (0.0, 0.0)
    assert abstains["gold"] == "Not mentioned in the conversation" and abstains["trap"] == "Rex"


def test_the_adversarial_judge_gets_the_abstention_rubric_and_the_trap(tmp_path: Path, monkeypatch: Any) -> None:
    import memory.llm as llm_module

    judged: list[str] = []

    def fake_make_llm(backend: str, model: str = "", **options: Any) -> ScriptedLLM:
        if model == "judge":
            return ScriptedLLM(lambda m: judged.append(m[0]["content"]) or '{"label": "CORRECT"}', model="judge")
        return ScriptedLLM(lambda m: "I don't know, you never told me.", model="answerer")

    monkeypatch.setattr(llm_module, "make_llm", fake_make_llm)
    result = run("none", "locomo", locomo_file(tmp_path), backend="openai", model="answerer", judge_model="judge",
                 embedder="hashing", max_questions=3)  # fmt: skip
    adversarial = next(i for i in result["items"] if i["category"] == "adversarial")
    assert adversarial["judge_rubric"] == "abstention" and adversarial["judge"] == 1
    prompt = judged[2]
    assert "Trap answer: Rex" in prompt and "Gold answer" not in prompt
    assert "Gold answer: Rex" in judged[0]  # the other questions keep mem0's prompt


def test_locomo_f1_is_the_headline_for_locomo_and_both_are_named_in_the_report(
    tmp_path: Path, monkeypatch: Any
) -> None:
    _answering(monkeypatch, lambda question: "Rex Rex")
    result = run("none", "locomo", locomo_file(tmp_path), backend="openai", model="m", embedder="hashing",
                 max_questions=1)  # fmt: skip
    single = result["categories"]["single-hop"]
    assert (single["locomo_f1"], single["f1"]) == (pytest.approx(0.6667), 1.0)
    assert result["f1_metrics"]["primary"] == "locomo_f1"
    text = render_markdown(result)
    assert "| category | n | LoCoMo F1 | set F1 | J |" in text
    assert "LoCoMo's reference scorer (snap-research/locomo@3eb6f2c" in text
    gvd = run("none", "gvd", backend="openai", model="m", embedder="hashing", dialogues=["Jason"], max_questions=1)
    assert gvd["f1_metrics"]["primary"] == "f1" and "| category | n | set F1 | LoCoMo F1 | J |" in render_markdown(gvd)


# ------------------------------------------------------------------------------------ costs, hygiene


def test_memory_work_after_each_turn_is_counted_by_purpose(tmp_path: Path) -> None:
    # MemGPT edits its memory after every turn (edit_timing="turn"): those calls used to be dropped
    result = run("memgpt", "locomo", locomo_file(tmp_path), backend="scripted", embedder="hashing")
    calls = result["llm_calls"]
    assert calls["by_phase"]["memory_turn"]["calls"] == 2  # one edit after the bot's turn in each session
    assert calls["by_purpose"]["memgpt_edit"]["calls"] == 2
    assert result["memory_llm_calls_per_session"] == 1.0
    assert calls["by_phase"]["answer"]["calls"] == 6 and calls["total"]["calls"] == 8
    assert calls["by_purpose"]["memgpt_edit"]["approx_prompt_tokens"] > 0


def test_the_stand_in_warning_is_the_first_line_and_gvd_scores_carry_the_gold_note() -> None:
    out = io.StringIO()
    assert main(["eval", "none", "--dataset", "gvd", "--backend", "scripted", "--embedder", "hashing", "--quiet",
                 "--dialogue", "Leo"], out) == 0  # fmt: skip
    text = out.getvalue()
    first = text.splitlines()[0]
    assert "Stand-in model" in first and "measure nothing about the arm" in first
    assert "written for memeval" in text and "human annotators" in text
    from memory.evalreport import stand_in_warning

    assert "measure nothing about the arm" in (stand_in_warning("local", "SmolLM2-135M-Instruct") or "")
    assert stand_in_warning("openai", "gpt-4o-mini") is None


def test_the_dataset_hash_is_checked_against_the_release(tmp_path: Path, capsys: Any) -> None:
    gvd = run("none", "gvd", backend="scripted", embedder="hashing", dialogues=["Leo"], max_questions=1)
    assert gvd["dataset_check"]["known"] is True
    assert all(f["release"] for f in gvd["dataset_check"]["files"])
    out = io.StringIO()
    path = locomo_file(tmp_path)
    assert (
        main(
            [
                "eval",
                "none",
                "--dataset",
                "locomo",
                str(path),
                "--backend",
                "scripted",
                "--embedder",
                "hashing",
                "--quiet",
                "--format",
                "json",
            ],
            out,
        )
        == 0
    )  # fmt: skip  (an unknown file is a warning, not a failure)
    result = json.loads(out.getvalue())
    assert result["dataset_check"]["known"] is False
    assert "not a known release" in capsys.readouterr().err
    assert any("79fa87e9" not in w and "not a known release" in w for w in result["warnings"])


def test_the_category_map_is_printed_with_counts_and_its_source(tmp_path: Path) -> None:
    result = run("none", "locomo", locomo_file(tmp_path), backend="scripted", embedder="hashing")
    cmap = result["category_map"]
    assert cmap["name"] == "locomo" and "evaluation.py" in cmap["source"]
    assert [(c["code"], c["name"], c["count"]) for c in cmap["categories"]] == [
        (1, "multi-hop", 1), (2, "temporal", 1), (3, "open-domain", 1), (4, "single-hop", 2), (5, "adversarial", 1),
    ]  # fmt: skip
    assert "Category map `locomo`: 1 = multi-hop (1), 2 = temporal (1)" in render_markdown(result)
    mem0 = run("none", "locomo", locomo_file(tmp_path), backend="scripted", embedder="hashing", category_map="mem0")
    assert set(mem0["categories"]) == {"single-hop", "temporal", "multi-hop", "open-domain", "adversarial"}
    assert mem0["categories"]["single-hop"]["n"] == 1 and mem0["categories"]["open-domain"]["n"] == 2
    assert "mem0ai/mem0#2609" in mem0["category_map"]["source"]


def test_known_wrong_gold_answers_can_be_left_out_and_both_scores_are_reported(
    tmp_path: Path, monkeypatch: Any
) -> None:
    _answering(monkeypatch, lambda question: "Rex")
    audit = tmp_path / "errors_conv_0.json"  # the public audit's format
    audit.write_text(json.dumps([
        {"question_id": "locomo_0_qa1", "error_type": "TEMPORAL_ERROR"},
        {"question_id": "locomo_0_qa0", "error_type": "WRONG_CITATION"},  # right answer, wrong evidence: kept
    ]))  # fmt: skip
    result = run("none", "locomo", locomo_file(tmp_path), backend="openai", model="m", embedder="hashing",
                 exclude_gold=[audit])  # fmt: skip
    assert result["gold_exclusions"]["ids"] == 1 and result["gold_exclusions"]["matched"] == 1
    assert result["overall"]["n"] == 5 and result["overall_without_excluded_gold"]["n"] == 4
    assert result["overall_without_excluded_gold"]["f1"] > result["overall"]["f1"]
    assert "overall without known-wrong gold" in render_markdown(result)
    ids = tmp_path / "wrong.txt"
    ids.write_text("# one id a line\nlocomo_0_qa3\n")
    again = run("none", "locomo", locomo_file(tmp_path), backend="openai", model="m", embedder="hashing",
                exclude_gold=[ids])  # fmt: skip
    assert [i["qid"] for i in again["items"] if i["excluded_gold"]] == ["locomo_0_qa3"]


def test_the_documented_locomo_command_works_and_the_old_form_too(tmp_path: Path) -> None:
    path = str(locomo_file(tmp_path))
    common = ["--backend", "scripted", "--embedder", "hashing", "--quiet"]
    # docs/memory-systems.md: `eval a_mem --dataset locomo /path/to/locomo10.json --backend openai --model M`
    documented, old = io.StringIO(), io.StringIO()
    assert main(["eval", "none", "--dataset", "locomo", path, *common], documented) == 0
    assert main(["eval", "none", path, "--dataset", "locomo", *common], old) == 0
    assert "# none on locomo" in documented.getvalue()
    timeless = [[x for x in out.getvalue().splitlines() if not x.startswith("Latency")] for out in (documented, old)]
    assert timeless[0] == timeless[1]
    with pytest.raises(SystemExit):
        main(["eval", "none", "--dataset", "locomo", path, "extra", *common], io.StringIO())
