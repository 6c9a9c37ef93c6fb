"""Users and roles without the Django admin (docs/operations.md, "Users and roles"):
``manage.py users`` and the admin role's People page, both through set_roles."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from diagnosis.models import Tenant
from diagnosis.roles import Role, roles_of
from tests.support.commands import manage
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


def users(*args: str) -> str:
    out = StringIO()
    call_command("users", *args, stdout=out)
    return out.getvalue()


def exit_code(*args: str) -> tuple[int, str]:
    with pytest.raises(CommandError) as raised:
        users(*args)
    return raised.value.returncode, str(raised.value)


def test_add_gives_the_role_and_a_manager_her_tenants(make_cluster) -> None:
    for cluster in (make_cluster("east"), make_cluster("west")):
        Tenant.objects.create(cluster=cluster, name="nlp")

    users("add", "grace", "--role", "sre")
    users("add", "mia", "--role", "manager", "--tenant", "nlp")

    assert roles_of(User.objects.get(username="grace")) == {Role.SRE}
    mia = User.objects.get(username="mia")
    assert roles_of(mia) == {Role.MANAGER}
    assert sorted(str(t) for t in mia.managed_tenants.all()) == ["east/nlp", "west/nlp"]
    assert not mia.has_usable_password()


def test_set_role_replaces_the_roles_and_says_unchanged_the_second_time(carol) -> None:
    users("set-role", "carol", "--role", "oncall", "--role", "viewer")
    again = users("set-role", "carol", "--role", "oncall", "--role", "viewer")

    assert roles_of(User.objects.get(username="carol")) == {Role.ONCALL, Role.VIEWER}
    assert "unchanged" in again


def test_the_admin_role_opens_the_admin_site_and_losing_it_closes_it(bob) -> None:
    users("set-role", "bob", "--role", "admin")
    assert User.objects.get(username="bob").is_staff
    users("set-role", "bob", "--role", "viewer")
    assert not User.objects.get(username="bob").is_staff


def test_list_json_and_remove(carol, mallory) -> None:
    listed = json.loads(users("list", "--json"))
    users("remove", "carol")

    assert {row["name"]: row["roles"] for row in listed} == {
        "carol": ["sre"],
        "mallory": ["manager"],
    }
    assert not User.objects.filter(username="carol").exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("add", "x", "--role", "boss"), "'boss'"),
        (("add", "x", "--role", "sre", "--tenant", "nlp"), "manager role only"),
        (("add", "x", "--role", "manager", "--tenant", "nope"), "'nope'"),
        (("set-role", "ghost", "--role", "sre"), "'ghost'"),
        (("remove", "ghost"), "'ghost'"),
        (("add", "carol", "--role", "sre"), "exists"),
    ],
)
def test_bad_input_and_unknown_objects_are_exit_code_2(carol, args, named) -> None:
    code, message = exit_code(*args)

    assert code == 2
    assert named in message


def test_the_command_line_exits_2_for_an_unknown_role() -> None:
    ran = manage("users", "add", "x", "--role", "boss", text=True)

    assert ran.returncode == 2
    assert "no role 'boss'" in ran.stderr


# -- the People page -----------------------------------------------------------------------------


def test_an_admin_adds_a_manager_with_tenants_in_one_step(alice, make_cluster) -> None:
    Tenant.objects.create(cluster=make_cluster("east"), name="nlp")
    client = logged_in_client(alice)

    page = client.get("/people/")
    added = client.post(
        "/people/", {"username": "mia", "roles": ["manager"], "tenants": ["nlp"], "password": ""}
    )

    assert page.status_code == 200
    assert 'href="/people/"' in page.content.decode()
    assert added.status_code == 302
    mia = User.objects.get(username="mia")
    assert roles_of(mia) == {Role.MANAGER}
    assert list(mia.managed_tenants.values_list("name", flat=True)) == ["nlp"]


def test_tenants_without_the_manager_role_are_refused_on_the_page(alice, make_cluster) -> None:
    Tenant.objects.create(cluster=make_cluster("east"), name="nlp")

    answer = logged_in_client(alice).post(
        "/people/", {"username": "x", "roles": ["sre"], "tenants": ["nlp"]}
    )

    assert answer.status_code == 400
    assert not User.objects.filter(username="x").exists()


@pytest.mark.parametrize("who", ["bob", "carol", "mallory", "nobody"])
def test_the_people_page_is_the_admin_roles_only(request, who) -> None:
    client = logged_in_client(request.getfixturevalue(who))

    assert client.get("/people/").status_code == 403
    assert client.post("/people/", {"username": "x", "roles": ["admin"]}).status_code == 403
    assert 'href="/people/"' not in client.get("/").content.decode()
    assert not User.objects.filter(username="x").exists()
