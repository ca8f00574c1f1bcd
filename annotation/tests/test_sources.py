"""CSV / JSONL import: every row validated, the bad line named, nothing half-imported."""

from __future__ import annotations

import json

import pytest

from annotation.sources import ImportError_, parse_import


def test_a_csv_cell_may_hold_a_json_list():
    data = 'm,s,summary\nHas a dog,Dog likes carrots,"[""Dog likes carrots"", ""Sleeps well""]"\n'
    (spec,) = parse_import(data, kind="pairs", filename="x.csv")
    assert spec["payload"]["summary"] == ["Dog likes carrots", "Sleeps well"]
    assert spec["payload"]["memory_before"] == ["Has a dog"]  # defaults to m alone


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"m": "a", "s": "b", "operator_op": "KEEP"}, "operator_op 'KEEP'"),
        ({"m": "a", "s": "b", "transcript": [{"speaker": "narrator", "text": "x"}]}, "speaker"),
        ({"m": "a", "s": "b", "summary": "[not json"}, "does not parse"),
        ({"m": "a", "s": "b", "i": "first"}, "'i' must be an integer"),
        ({"m": "x" * 5001, "s": "b"}, "longer than"),
    ],
)
def test_a_bad_jsonl_line_is_named(line, message):
    good = json.dumps({"m": "a", "s": "b"})
    with pytest.raises(ImportError_, match="line 2") as err:
        parse_import(good + "\n" + json.dumps(line) + "\n", kind="pairs", filename="x.jsonl")
    assert message in str(err.value)


def test_summary_imports_need_a_summary():
    ok = parse_import(json.dumps({"summary": ["Has a cold."], "transcript": "user: I have a cold"}), kind="summaries")
    assert ok[0]["payload"] == {
        "summary": ["Has a cold."],
        "transcript": [{"speaker": "user", "text": "I have a cold"}],
    }
    with pytest.raises(ImportError_, match="'summary' is missing"):
        parse_import(json.dumps({"transcript": []}), kind="summaries")


def test_an_empty_file_is_refused():
    with pytest.raises(ImportError_, match="no rows"):
        parse_import("m,s\n", kind="pairs", filename="x.csv")
