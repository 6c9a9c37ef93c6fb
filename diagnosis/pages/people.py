"""People (docs/ui.md, "People"): the admin role's page listing every user with their roles, and
adding one with a role, and a manager's tenants, in one step (the Django admin needs two pages
and has no role field). Writes go through :mod:`diagnosis.actions.people.roles`."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _lazy
from django.views.decorators.http import require_http_methods

from diagnosis.actions.people.roles import PeopleError, RoleGrant, add_user, current_grant
from diagnosis.models import Tenant
from diagnosis.roles import Role, can_administer

ROLE_LABELS = {
    Role.VIEWER: _lazy("viewer: reads every cluster"),
    Role.SRE: _lazy("sre: findings and recommendations"),
    Role.ONCALL: _lazy("oncall: incidents and node drains"),
    Role.MANAGER: _lazy("manager: their tenants' reports only"),
    Role.ADMIN: _lazy("admin: everything, users and data sources"),
}


class AddPersonForm(forms.Form):
    username = forms.CharField(label=_lazy("User name"), max_length=150)
    email = forms.EmailField(label=_lazy("Email"), required=False)
    roles = forms.MultipleChoiceField(
        label=_lazy("Roles"),
        choices=list(ROLE_LABELS.items()),
        widget=forms.CheckboxSelectMultiple,
    )
    tenants = forms.MultipleChoiceField(
        label=_lazy("Tenants (managers)"), required=False, widget=forms.SelectMultiple
    )
    password = forms.CharField(
        label=_lazy("Password"),
        required=False,
        widget=forms.PasswordInput,
        help_text=_lazy("Leave empty for a person who logs in through single sign-on."),
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        names = Tenant.objects.order_by("name").values_list("name", flat=True).distinct()
        self.fields["tenants"].choices = [(name, name) for name in names]

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if get_user_model().objects.filter(username=username).exists():
            raise ValidationError(gettext("This user exists."))
        return username

    def clean(self) -> dict:
        data = super().clean()
        roles = set(data.get("roles") or ())
        if data.get("tenants") and Role.MANAGER not in roles:
            self.add_error("tenants", gettext("Tenants are for the manager role only."))
        if data.get("password"):
            try:
                validate_password(data["password"], get_user_model()(username=data.get("username")))
            except ValidationError as exc:
                self.add_error("password", exc)
        return data


def _require_admin(request: HttpRequest) -> None:
    if not can_administer(request.user):
        raise PermissionDenied("people are managed by the admin role")


@require_http_methods(["GET", "POST"])
def people(request: HttpRequest) -> HttpResponse:
    _require_admin(request)
    form = AddPersonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        grant = RoleGrant(frozenset(Role(r) for r in data["roles"]), frozenset(data["tenants"]))
        try:
            user = add_user(
                data["username"], grant, email=data["email"], password=data["password"] or None
            )
        except PeopleError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                gettext("Added %(name)s: %(roles)s.")
                % {"name": user.get_username(), "roles": grant.describe()},
            )
            return HttpResponseRedirect(reverse("diagnosis:people"))
    users = get_user_model().objects.order_by("username")
    rows = [
        {"person": user, "roles": sorted(grant.roles), "tenants": sorted(grant.tenants)}
        for user in users
        for grant in [current_grant(user)]
    ]
    return render(
        request,
        "diagnosis/people.html",
        {"form": form, "rows": rows, "section": "people"},
        status=400 if request.method == "POST" else 200,
    )
