"""Roles as groups (docs/architecture.md#roles-and-security) and the questions access checks ask of
them."""

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group

from diagnosis.roles import (
    Role,
    can_administer,
    can_apply,
    can_approve,
    can_handle_incidents,
    can_propose,
    can_read,
    is_tenant_scoped,
    roles_of,
)

pytestmark = pytest.mark.django_db


def test_the_role_groups_migration_creates_every_role(django_user_model):
    # run it again here: a transactional test before this one on the worker flushes the groups
    migration = importlib.import_module("diagnosis.migrations.0007_role_groups")
    Group.objects.all().delete()
    migration.create_role_groups(apps, schema_editor=None)
    assert set(Group.objects.values_list("name", flat=True)) == {r.value for r in Role}


def test_a_superuser_is_an_admin(alice):
    assert Role.ADMIN in roles_of(alice)
    assert can_administer(alice)


def test_a_user_without_a_role_reads_nothing(nobody):
    assert not can_read(nobody)


def test_a_viewer_reads_but_changes_nothing(bob):
    assert can_read(bob)
    assert not can_propose(bob)
    assert not can_apply(bob, "placement-policy")
    assert not can_administer(bob)


def test_an_sre_proposes_and_approves_someone_elses_request(carol, dave):
    assert can_propose(carol)
    assert can_approve(dave, "queue-weight", requested_by=carol) == (True, "")


def test_an_sre_cannot_approve_her_own_request(carol):
    allowed, reason = can_approve(carol, "queue-weight", requested_by=carol)
    assert not allowed
    assert "someone other than" in reason


def test_oncall_may_approve_her_own_drain_but_nothing_else(erin, carol):
    assert can_approve(erin, "drain-node", requested_by=erin) == (True, "")
    assert not can_approve(erin, "placement-policy", requested_by=carol)[0]
    assert can_apply(erin, "drain-node")
    assert not can_apply(erin, "queue-weight")
    assert can_handle_incidents(erin)


def test_a_manager_alone_is_tenant_scoped(mallory, bob):
    assert is_tenant_scoped(mallory)
    assert not is_tenant_scoped(bob)


def test_another_role_lifts_the_managers_scope(make_user):
    both = make_user("morgan", roles=("manager", "viewer"))
    assert not is_tenant_scoped(both)
