"""The service tests again on PostgreSQL, where claims and pair submits take the one-statement paths.

The SQLite pass covers the ORM path; these are the same scenarios (same names) against the SQL of
``annotation.services._CLAIM_SQL`` and ``_SUBMIT_PAIR_SQL``, so both implementations answer to one
specification.
"""

from __future__ import annotations

import pytest

from .test_services import *  # noqa: F403 - the tests themselves are what this module collects

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
