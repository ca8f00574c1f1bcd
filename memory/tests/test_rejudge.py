"""``memory eval --rejudge lenient,strict --second-judge-model M``: the answers of a finished run (its results
file) re-judged under other rubrics and by a second judge model, with no answer generated again, the range per
category and overall, and each judge's false-acceptance rate on the leniency control set beside its scores.

The endpoint is :class:`memory.tests.fake_openai.FaultyOpenAI` with scripted judges (a stand-in that says
nothing about any real model): the run's judge ``judge-a`` accepts anything when its prompt asks it to be
generous (mem0's prompt, the lenient rubric) and otherwise only the gold answer itself; ``judge-b`` accepts only
the gold answer under every prompt."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr
from pathlib import Path

from memory.__main__ import main
from memory.judgeprompts import load
from memory.rejudge import RUN_PROMPT
from memory.tests.fake_openai import FaultyOpenAI

MOVIE = "The Shawshank Redemption"  # the gold answer of Leo's one question the fake answers right


def _text(messages: list[dict[str, str]]) -> str:
    return messages[-1]["content"]


def answering(messages: list[dict[str, str]]) -> str:
    """The arm's answer model: the movie for the movie question, "Rex" for every other."""
    return MOVIE if "which movie" in _text(messages) else "Rex"


def _gold_and_answer(prompt: str) -> tuple[str, str]:
    gold = re.findall(r"Gold answer: (.*)", prompt)[-1].strip()  # mem0's prompt has an example gold answer first
    answer = re.findall(r"Generated answer: (.*)", prompt)[-1].strip()
    return gold, answer


def judge_a(messages: list[dict[str, str]]) -> str:
    prompt = _text(messages)
    gold, answer = _gold_and_answer(prompt)
    generous = "be generous" in prompt.lower()
    return f'Checked. {{"label": "{"CORRECT" if generous or answer == gold else "WRONG"}"}}'


def judge_b(messages: list[dict[str, str]]) -> str:
    gold, answer = _gold_and_answer(_text(messages))
    return f'{{"label": "{"CORRECT" if answer == gold else "WRONG"}"}}'


def _eval(server: FaultyOpenAI, results: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = ["eval", "none", "--dataset", "gvd", "--dialogue", "Leo", "--backend", "openai", "--model", "answers",
            "--judge-model", "judge-a", "--base-url", server.base_url, "--api-key", "k", "--embedder", "hashing",
            "--results", str(results), "--quiet", *extra]  # fmt: skip
    with redirect_stderr(err):
        code = main(args, out=out)
    return code, out.getvalue(), err.getvalue()


def test_the_stored_answers_are_rejudged_under_each_rubric_and_judge_with_their_leniency(tmp_path: Path) -> None:
    results = tmp_path / "leo.jsonl"
    with FaultyOpenAI(answering, by_model={"judge-a": judge_a, "judge-b": judge_b}) as server:
        code, _, err = _eval(server, results)
        assert code == 0, err
        assert server.models.count("answers") == 7 and server.models.count("judge-a") == 7
        first = len(server.log)

        code, out, err = _eval(server, results, "--resume", "--rejudge", "lenient,strict", "--second-judge-model",
                               "judge-b", "--format", "json")  # fmt: skip
        assert code == 0, err
        new = server.models[first:]
        # no answer generated again: every new request went to a judge (7 answers x 4 re-judged variants, and the
        # control set's 60 answers under each of the 5 variants, the run's own included)
        assert "answers" not in new
        assert new.count("judge-a") == 7 * 2 + 60 * 3 and new.count("judge-b") == 7 * 3 + 60 * 3

        again = len(server.log)
        code, _, err = _eval(server, results, "--resume", "--rejudge", "lenient,strict", "--second-judge-model",
                             "judge-b", "--format", "md")  # fmt: skip
        assert code == 0, err
        assert len(server.log) == again  # every verdict was kept in the results file: nothing asked twice

    section = json.loads(out)["sensitivity"]
    variants = {(v["judge_model"], v["rubric"]): v for v in section["variants"]}
    assert list(variants) == [("judge-a", "mem0"), ("judge-a", "lenient"), ("judge-a", "strict"),
                              ("judge-b", "mem0"), ("judge-b", "lenient"), ("judge-b", "strict")]  # fmt: skip
    run, strict = variants[("judge-a", "mem0")], variants[("judge-a", "strict")]
    assert run["source"] == "run" and run["overall"] == 1.0  # mem0's prompt is generous: every answer passes
    assert run["prompt_sha256"] == RUN_PROMPT.sha256
    assert strict["prompt"] == "answer-strict-v1.txt" and strict["prompt_sha256"] == load("answer", "strict").sha256
    assert strict["overall"] == round(1 / 7, 4) and strict["categories"]["temporal"] == round(1 / 4, 4)
    assert all(v["overall"] == round(1 / 7, 4) for k, v in variants.items() if k[0] == "judge-b")
    assert section["range"]["overall"] == {"min": round(1 / 7, 4), "max": 1.0, "spread": round(1 - 1 / 7, 4),
                                           "variants": 6}  # fmt: skip
    assert section["range"]["categories"]["user-fact"]["min"] == 0.0
    # the leniency control set beside each judge: a generous prompt accepts every wrong answer
    assert run["leniency"]["false_acceptance"]["rate"] == 1.0 and run["leniency"]["cases"] == 30
    assert strict["leniency"]["false_acceptance"]["rate"] == 0.0 and strict["leniency"]["gold_acceptance"]["rate"] == 1
    assert variants[("judge-b", "lenient")]["leniency"]["false_acceptance"]["rate"] == 0.0


def test_the_markdown_report_shows_the_range_and_the_false_acceptance_beside_the_scores(tmp_path: Path) -> None:
    results = tmp_path / "leo.jsonl"
    with FaultyOpenAI(answering, by_model={"judge-a": judge_a, "judge-b": judge_b}) as server:
        code, out, err = _eval(server, results, "--rejudge", "strict")
    assert code == 0, err
    section = out.split("## Judge sensitivity")[1]
    assert "| judge-a | mem0 (the run's) |" in section and "| judge-a | strict |" in section
    assert "1.00 [0.89, 1.00]" in section  # mem0's prompt: 30 of 30 wrong answers accepted (Wilson 95% CI)
    assert "| **range** |" in section and "0.143-1.000" in section


def test_rejudging_needs_a_judge_model_and_known_rubrics(tmp_path: Path) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["eval", "none", "--dataset", "gvd", "--backend", "scripted", "--rejudge", "strict"],
                    out=io.StringIO()) == 2  # fmt: skip
        assert main(["eval", "none", "--dataset", "gvd", "--backend", "openai", "--rejudge", "harsh"],
                    out=io.StringIO()) == 2  # fmt: skip
    text = err.getvalue()
    assert "the scripted backend has none" in text and "unknown rubric(s) ['harsh']" in text
