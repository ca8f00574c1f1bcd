"""Who may change a study's automatic judges: its owner and editors. A viewer of the research team reads the page
and changes nothing; nobody names a server secret as the judge's API key."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from judges.models import Judge
from studies.models import Study


def login(user: User) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.mark.django_db
def test_a_viewer_reads_the_judges_page_and_changes_nothing(study: Study, other: User) -> None:
    study.viewers.add(other)
    viewer = login(other)
    assert viewer.get(reverse("judges:study", args=[study.slug])).status_code == 200
    judge = Judge.objects.create(study=study, name="j", model="m")
    for url, data in [
        (reverse("judges:add", args=[study.slug]), {"name": "evil", "model": "m", "base_url": "http://127.0.0.1:9/v1"}),
        (reverse("judges:run", args=[study.slug, judge.pk]), {}),
        (reverse("judges:sample", args=[study.slug]), {"size": 60, "labels_per_item": 3}),
        (reverse("judges:blinding", args=[study.slug]), {}),
    ]:
        assert viewer.post(url, data).status_code == 403, url
    assert list(Judge.objects.filter(study=study).values_list("name", flat=True)) == ["j"]
    assert not study.annotation_queues.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name", ["SECRET_KEY", "DJANGO_SECRET_KEY", "PROLIFIC_API_TOKEN", "DATABASE_URL", "lower_api_key"]
)
def test_the_api_key_variable_must_name_an_api_key(study: Study, researcher: User, name: str) -> None:
    """The judge sends the variable's value to its base_url: naming SECRET_KEY with one's own server as the base_url
    would hand the site's secrets to whoever may add a judge."""
    data = {"name": "j", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": name, "epsilon": "0.15"}
    login(researcher).post(reverse("judges:add", args=[study.slug]), data)
    assert not Judge.objects.filter(study=study).exists()


@pytest.mark.django_db
def test_an_api_key_variable_is_accepted(study: Study, researcher: User) -> None:
    data = {"name": "j", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "OPENROUTER_API_KEY"}
    data["epsilon"] = "0.15"
    login(researcher).post(reverse("judges:add", args=[study.slug]), data)
    assert Judge.objects.get(study=study).api_key_env == "OPENROUTER_API_KEY"


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/v1", "gopher://x"])
def test_the_judges_endpoint_must_be_http(study: Study, researcher: User, url: str) -> None:
    data = {"name": "j", "model": "m", "base_url": url, "api_key_env": "OPENAI_API_KEY", "epsilon": "0.15"}
    page = login(researcher).post(reverse("judges:add", args=[study.slug]), data, follow=True)
    assert not Judge.objects.filter(study=study).exists()
    assert "starts with http:// or https://" in page.content.decode()
