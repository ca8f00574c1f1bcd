from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.test import Client
from django.urls import reverse

from analysis.report import analyze
from reports.models import ImportedDataset, ImportedRating
from reports.tests.conftest import WIDE, upload
from studies.models import Study

pytestmark = pytest.mark.django_db

JI_METRICS = ["interesting", "fun", "consistent", "fluent", "topic", "robotic", "repetitive"]
JI_POSITIVE = JI_METRICS[:5]
# tests/data/ji2022-dialogue-eval/README.md: the published system z of the passed workers (Ji et al. 2022, run 1)
JI_SYSTEM_Z = {
    "A": 0.534,
    "B": 0.419,
    "A_p": 0.318,
    "C": 0.262,
    "C_p": 0.189,
    "B_p": 0.173,
    "D": -0.087,
    "D_p": -0.201,
    "E_p": -0.217,
    "E": -0.243,
}


def flat(obj: Any, path: str = "") -> dict[str, Any]:
    """{"a.b.0": leaf} so nested results compare with pytest.approx (row order changes the last float bits)."""
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in flat(val, f"{path}.{key}").items()}
    if isinstance(obj, list):
        return {k: v for i, val in enumerate(obj) for k, v in flat(val, f"{path}.{i}").items()}
    return {path: obj}


def same_numbers(a: Any, b: Any) -> bool:
    fa, fb = flat(a), flat(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        if isinstance(fa[k], float) and isinstance(fb[k], float):
            assert fa[k] == pytest.approx(fb[k], rel=1e-9, abs=1e-12), k
        else:
            assert fa[k] == fb[k], k
    return True


def errors(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_the_import_page_is_for_researchers_only(client: Client, study: Study, outsider: Any) -> None:
    assert client.get(reverse("reports:import_ratings", args=[study.slug])).status_code == 302
    client.force_login(outsider)
    assert upload(client, study, WIDE, metrics="good,bad").status_code == 403
    assert not ImportedDataset.objects.exists()


def test_a_wide_csv_is_imported_and_analysed_by_the_same_pipeline(researcher_client: Client, study: Study) -> None:
    response = upload(researcher_client, study, WIDE, metrics="good, bad", session="session", reverse="bad")
    dataset = ImportedDataset.objects.get()
    assert response.status_code == 302 and response["Location"] == dataset.get_absolute_url()
    assert dataset.metrics == ["good", "bad"] and dataset.reverse_metrics == ["bad"] and dataset.has_session
    assert dataset.n_ratings == ImportedRating.objects.count() == 16
    export = researcher_client.get(reverse("reports:dataset_export", args=[study.slug, dataset.pk, "json"]))
    assert export["Content-Disposition"] == f'attachment; filename="test-study-import-{dataset.pk}-analysis.json"'
    result = json.loads(export.content)
    expected = analyze(
        pd.read_csv(io.StringIO(WIDE)),
        worker="worker",
        unit="unit",
        arm="arm",
        session="session",
        metrics=["good", "bad"],
        reverse=["bad"],
    )
    assert same_numbers(result["arms"], expected["arms"])
    assert same_numbers(result["by_session"], expected["by_session"])
    page = researcher_client.get(dataset.get_absolute_url()).content.decode()
    assert "Imported: External" in page and 'id="table-sessions"' in page
    assert 'hx-trigger="every 10s"' not in page  # imported data do not change: no polling


def test_rows_that_share_their_keys_but_differ_are_imported_as_distinct_conversations(
    researcher_client: Client, study: Study
) -> None:
    # no session column: the two rows of each (worker, unit, arm) differ, so they are two conversations (issue 20)
    response = upload(researcher_client, study, WIDE, metrics="good,bad")
    assert response.status_code == 302
    dataset = ImportedDataset.objects.get()
    result = json.loads(
        researcher_client.get(reverse("reports:dataset_export", args=[study.slug, dataset.pk, "json"])).content
    )
    assert result["repeated_rows"]["rows"] == 8 and result["repeated_rows"]["groups"] == 4
    assert result["arms"]["A"]["n_units"] == 4
    page = researcher_client.get(dataset.get_absolute_url()).content.decode()
    assert "8 rows share their (worker, unit, arm) with another row in 4 group(s) and differ" in page


def test_a_long_csv_is_imported_too(researcher_client: Client, study: Study) -> None:
    wide = pd.read_csv(io.StringIO(WIDE))
    long = wide.melt(id_vars=["worker", "unit", "arm", "session"], var_name="criterion", value_name="value")
    response = upload(
        researcher_client,
        study,
        long.to_csv(index=False),
        layout="long",
        session="session",
        metric_column="criterion",
        score_column="value",
    )
    assert response.status_code == 302
    dataset = ImportedDataset.objects.get()
    assert sorted(dataset.metrics) == ["bad", "good"] and dataset.n_ratings == 16
    result = json.loads(
        researcher_client.get(reverse("reports:dataset_export", args=[study.slug, dataset.pk, "json"])).content
    )
    assert result["arms"]["A"]["metrics"]["good"]["mean_raw"] == pytest.approx((80 + 70 + 90 + 85) / 4)


@pytest.mark.parametrize(
    "fields,content,message",
    [
        ({"metrics": "good,bad", "worker": "rater"}, WIDE, "unknown column(s) [&#x27;rater&#x27;]"),
        ({"metrics": "good,ugly"}, WIDE, "unknown column(s) [&#x27;ugly&#x27;]"),
        (
            {"metrics": "good,bad"},
            WIDE.replace("w1,e1,A,1,80", "w1,e1,A,1,eighty"),
            "non-numeric score(s) in &#x27;good&#x27;",
        ),
        ({"metrics": "good,bad"}, WIDE.replace("w1,e1,A,2,70", "w1,e1,A,2,170"), "outside [0, 100]: row 3 good=170"),
        ({"metrics": "good,bad"}, WIDE.replace("w1,e1,A,2,70", "w1,e1,A,2,-1"), "outside [0, 100]"),
        (
            {"metrics": "good,bad"},
            WIDE.replace("w2,e3,A,1", ",e3,A,1"),
            "column &#x27;worker&#x27; is empty in 1 row(s) (rows 6)",
        ),
        (
            {"metrics": "good,bad", "session": "session"},
            WIDE + "w2,e4,B,2,35,55\n",
            "1 row(s) are exact copies of an earlier row, every column equal (rows 10)",
        ),
        ({"metrics": "good,bad", "session": "session", "qc_arm": "Z"}, WIDE, "QC arm &#x27;Z&#x27; does not occur"),
        ({"metrics": "good,bad", "session": "session", "reverse": "fun"}, WIDE, "reversed metric(s) [&#x27;fun&#x27;]"),
        (
            {"metrics": "good,bad", "session": "session", "qc_arm": "B", "qc_metrics": "nice"},
            WIDE,
            "QC metric(s) [&#x27;nice&#x27;]",
        ),
        ({"metrics": "good,bad"}, "worker,unit,arm,good,bad\n", "no scores at all"),
        ({"metrics": "good,bad"}, "\n\n", "the file is empty"),
        ({"metrics": "good,bad"}, b"\xff\xfeworker", "not UTF-8"),
        (
            {"metrics": "good,bad"},
            WIDE.replace("w2,e4,B,1", "w2,e\x004,B,1"),
            "a NUL character (\\x00) in line 8, column &#x27;unit&#x27;",
        ),
        (
            {"metrics": "good,bad"},
            WIDE.replace("session,good,bad", "session,good,good"),
            "the header names the column &#x27;good&#x27; twice (columns 5 and 6)",
        ),
        (
            {"metrics": "good,bad"},
            "\r\n" + WIDE.replace("session,good,bad", "session,good,good"),
            "the header names the column &#x27;good&#x27; twice (columns 5 and 6)",
        ),
    ],
)
def test_bad_tables_are_rejected_with_a_clear_message(
    researcher_client: Client, study: Study, fields: dict, content: str | bytes, message: str
) -> None:
    text = errors(upload(researcher_client, study, content, **fields))
    assert "The ratings could not be imported" in text
    assert message in text
    assert not ImportedDataset.objects.exists() and not ImportedRating.objects.exists()


def test_an_empty_upload_is_refused(researcher_client: Client, study: Study) -> None:
    assert "The submitted file is empty." in errors(upload(researcher_client, study, "", metrics="good,bad"))


def test_a_wide_table_needs_its_metric_columns_named(researcher_client: Client, study: Study) -> None:
    text = errors(upload(researcher_client, study, WIDE, metrics=""))
    assert "Name the metric columns of the wide table." in text
    assert not ImportedDataset.objects.exists()


def test_an_imported_dataset_can_be_deleted(researcher_client: Client, study: Study) -> None:
    upload(researcher_client, study, WIDE, metrics="good,bad", session="session")
    dataset = ImportedDataset.objects.get()
    response = researcher_client.post(reverse("reports:dataset_delete", args=[study.slug, dataset.pk]))
    assert response.status_code == 302
    assert not ImportedDataset.objects.exists() and not ImportedRating.objects.exists()


def test_a_dataset_of_another_study_is_not_found(researcher_client: Client, study: Study) -> None:
    upload(researcher_client, study, WIDE, metrics="good,bad", session="session")
    other = Study.objects.create(name="Other")
    dataset = ImportedDataset.objects.get()
    assert researcher_client.get(reverse("reports:dataset_analysis", args=[other.slug, dataset.pk])).status_code == 404


def test_importing_the_ji_2022_ratings_reproduces_the_published_numbers(
    researcher_client: Client, study: Study, ji_run1_csv: Path
) -> None:
    response = upload(
        researcher_client,
        study,
        ji_run1_csv.read_bytes(),
        name=ji_run1_csv.name,
        worker="worker_id",
        unit="hit_id",
        arm="model",
        metrics=",".join(JI_METRICS),
        qc_arm="QualityControl",
        qc_metrics=",".join(JI_POSITIVE),
        name_="Ji run 1",
    )
    assert response.status_code == 302
    dataset = ImportedDataset.objects.get()
    result = json.loads(
        researcher_client.get(reverse("reports:dataset_export", args=[study.slug, dataset.pk, "json"])).content
    )

    assert result["qc"]["workers_total"] == 248
    assert result["qc"]["workers_passed"] == 173
    authors = pd.read_csv(ji_run1_csv).groupby("worker_id")["authors_qc_status"].first()
    assert set(result["qc"]["failed_workers"]) == set(authors[authors == "fail"].index)
    assert {arm: round(a["overall_z"], 3) for arm, a in result["arms"].items()} == JI_SYSTEM_Z

    # the same numbers as the library on the CSV itself (and so as the CLI, which calls it)
    direct = analyze(
        pd.read_csv(ji_run1_csv),
        worker="worker_id",
        unit="hit_id",
        arm="model",
        metrics=JI_METRICS,
        qc_arm="QualityControl",
        qc_metrics=JI_POSITIVE,
    )
    assert same_numbers(result["arms"], direct["arms"])
    assert same_numbers(result["pairwise"], direct["pairwise"])
    assert same_numbers(result["qc"], direct["qc"])

    page = researcher_client.get(dataset.get_absolute_url()).content.decode()
    assert "<strong>173 of 248</strong> workers passed" in page
    assert "+0.534" in page and "-0.243" in page


class _BlockReadsOnly(io.BytesIO):
    """A file that refuses to be read whole: a caller must ask for blocks of at most 1 MB."""

    def read(self, size: int | None = -1) -> bytes:
        assert size is not None and 0 <= size <= 2**20, f"read({size}) would load the whole file"
        return super().read(size)

    def read1(self, size: int | None = -1) -> bytes:
        return self.read(size)


def test_an_uploaded_csv_is_parsed_in_blocks_not_read_whole_into_memory() -> None:
    from reports.imports import read_table

    table = read_table(_BlockReadsOnly(b"w,u,arm,score\n" + b"w1,u1,a,50\n" * 100_000))
    assert table.shape == (100_000, 4) and table["score"].iloc[0] == "50"


def test_the_csv_export_neutralises_cells_a_spreadsheet_would_run_as_formulas(
    researcher_client: Client, study: Study
) -> None:
    hostile = (
        WIDE.replace("w1,", '"=HYPERLINK(""http://evil.example"",""x"")",')
        .replace("w2,", "@SUM(1+1),")
        .replace(",A,", ",+A,")
        .replace(",B,", ",-B,")
    )
    upload(researcher_client, study, hostile, metrics="good,bad", session="session")
    dataset = ImportedDataset.objects.get()
    export = researcher_client.get(reverse("reports:dataset_export", args=[study.slug, dataset.pk, "csv"]))
    table = pd.read_csv(io.StringIO(export.content.decode()), dtype=str, keep_default_na=False)
    cells = [str(v) for v in table.to_numpy().ravel()] + list(table.columns)
    texts = [c for c in cells if c[:1] in ("'", "=", "+", "-", "@")]
    assert {'\'=HYPERLINK("http://evil.example","x")', "'@SUM(1+1)", "'+A", "'-B"} <= set(texts)
    numbers = [c for c in texts if not c.startswith("'")]
    assert all(float(c) < 0 for c in numbers)  # only negative numbers (z-scores) start with "-"


@pytest.mark.parametrize(
    "column, value, limit",
    [("worker", "w" * 201, 200), ("arm", "A" * 300, 200), ("unit", "u" * 201, 200), ("session", "s" * 51, 50)],
)
def test_values_longer_than_the_database_stores_are_refused_naming_the_column_and_row(
    researcher_client: Client, study: Study, column: str, value: str, limit: int
) -> None:
    table = pd.read_csv(io.StringIO(WIDE), dtype=str)
    table.loc[2, column] = value
    if column == "arm":
        table.loc[table["arm"] == "A", "arm"] = value  # every arm needs two or more units
    text = errors(upload(researcher_client, study, table.to_csv(index=False), metrics="good,bad", session="session"))
    assert f"a value in the {column} column has {len(value)} characters; at most {limit} can be stored" in text
    assert "data row" in text
    assert not ImportedDataset.objects.exists() and not ImportedRating.objects.exists()


def test_a_metric_name_longer_than_100_characters_is_refused(researcher_client: Client, study: Study) -> None:
    long_metric = "m" * 101
    content = WIDE.replace(",good,", f",{long_metric},")
    text = errors(upload(researcher_client, study, content, metrics=f"{long_metric},bad", session="session"))
    assert "a value in the metric column has 101 characters; at most 100" in text


def test_the_length_limits_are_the_models() -> None:
    from reports.imports import FIELD_LIMITS

    assert {f: ImportedRating._meta.get_field(f).max_length for f in FIELD_LIMITS} == FIELD_LIMITS
