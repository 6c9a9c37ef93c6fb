"""Issue #29, item 7: a downgrade below 0017 would delete every hashed API token (their plain
copies are gone once ``api_token migrate-legacy`` ran); the migration refuses it, first, with
a message saying what to do."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import migrations

from diagnosis.models import ApiToken

TOKENS = importlib.import_module("diagnosis.migrations.0017_api_tokens")

pytestmark = pytest.mark.django_db


def test_the_downgrade_checks_before_it_drops_the_table() -> None:
    last = TOKENS.Migration.operations[-1]  # reversed first
    assert isinstance(last, migrations.RunPython)
    assert last.reverse_code is TOKENS.refuse_to_drop_tokens


def test_a_downgrade_with_tokens_is_refused_and_keeps_them(make_user) -> None:
    ApiToken.issue(make_user("scheduler"), "events")
    with pytest.raises(RuntimeError, match="it would delete 1 hashed API token"):
        TOKENS.refuse_to_drop_tokens(apps, None)
    assert ApiToken.objects.count() == 1


def test_a_downgrade_without_tokens_goes_on() -> None:
    TOKENS.refuse_to_drop_tokens(apps, None)
