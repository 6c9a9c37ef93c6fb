"""The confirmation of a cluster's new size, which its cycles hold back from judgement while it
dropped at once (diagnosis/actions/records/cluster_size.py; docs/operations.md, "A cluster that
shrinks at once")."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from diagnosis.access import get_cluster_for_user
from diagnosis.actions.records.cluster_size import confirm_cluster_size
from diagnosis.actions.workflow.base import WorkflowError


@require_POST
def confirm_size(request: HttpRequest, name: str) -> HttpResponse:
    """An SRE or admin confirms the size the cluster's cycles hold back (audited); 403 for
    another role."""
    cluster = get_cluster_for_user(request.user, name)
    try:
        confirm_cluster_size(cluster, request.user)
    except WorkflowError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            gettext("The new size of %(cluster)s is confirmed: its next cycle is judged.")
            % {"cluster": cluster.name},
        )
    return HttpResponseRedirect(reverse("diagnosis:cluster", kwargs={"name": cluster.name}))
