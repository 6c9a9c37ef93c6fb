"""Fairness-report subscriptions: subscribing, and mailing the reports that are due."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from diagnosis.access import get_cluster_for_user
from diagnosis.models import (
    Cluster,
    ReportFrequency,
    ReportSubscription,
)
from diagnosis.reports.fairness_report import (
    SUBSCRIPTION_EVERY,
    build_fairness_report,
    default_end,
    subscription_period,
)
from diagnosis.reports.pdf import render_pdf


def subscribe_to_report(user: Any, cluster: Cluster, frequency: str) -> Any:
    """Create or change a user's standing order for a cluster's fairness report (``weekly`` or
    ``monthly``); an empty ``frequency`` cancels it (returns None). The caller has checked that
    the user may read the cluster."""

    if not frequency:
        ReportSubscription.objects.filter(user=user, cluster=cluster).delete()
        return None
    if frequency not in ReportFrequency.values:
        known = ", ".join(ReportFrequency.values)
        raise ValueError(f"frequency: {frequency!r} is not one of: {known}")
    subscription, _ = ReportSubscription.objects.update_or_create(
        user=user, cluster=cluster, defaults={"frequency": frequency}
    )
    return subscription


def send_report_subscription(subscription: Any, *, now: datetime | None = None) -> bool:
    """Email one subscriber their fairness report as a PDF (the period ending now, or at the
    newest rollup of a cluster whose clock runs ahead), through Django's mail backend.

    The report is built for the subscriber, through the same access checks as the page: a
    manager gets their tenants only, and a user who may no longer read the cluster gets nothing
    (the subscription records why). Returns whether a mail was sent.
    """

    now = now or timezone.now()
    user = subscription.user
    problem = ""
    if not user.email:
        problem = "the user has no email address"
    else:
        try:
            cluster = get_cluster_for_user(user, subscription.cluster.name)
        except Http404:
            problem = "the user may no longer read this cluster"
    if problem:
        subscription.last_error = problem
        subscription.save(update_fields=["last_error"])
        return False
    period = subscription_period(subscription.frequency, default_end(cluster, now))
    data = build_fairness_report(user, cluster, period, now=now)
    start, end = period.as_dict()["from"][:10], period.as_dict()["to"][:10]
    message = EmailMessage(
        subject=f"[gpuobs] {cluster.name}: tenant fairness report {start} – {end}",
        body=(
            f"Your {subscription.get_frequency_display().lower()} tenant fairness report of "
            f"cluster {cluster.name} for {start} – {end} is attached as a PDF.\n\n"
            "To change or cancel this email, open the cluster's fairness report in gpuobs.\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[user.email],
    )
    message.attach(
        f"fairness-{cluster.name}-{start}-{end}.pdf", render_pdf(data), "application/pdf"
    )
    message.send()
    subscription.last_sent_at = now
    subscription.last_error = ""
    subscription.save(update_fields=["last_sent_at", "last_error"])
    return True


# An hourly beat checks; a subscription is due this much before its full interval is over, so
# a weekly report goes out on the same hour each week rather than an hour later every time.
SUBSCRIPTION_SLACK = timedelta(minutes=30)


def send_due_report_subscriptions(*, now: datetime | None = None) -> int:
    """Send every subscription whose interval (7 or 30 days) has passed since it was last sent
    (or that was never sent). Returns how many mails went out."""

    now = now or timezone.now()
    due = Q(last_sent_at__isnull=True)
    for frequency, every in SUBSCRIPTION_EVERY.items():
        due |= Q(frequency=frequency, last_sent_at__lte=now - every + SUBSCRIPTION_SLACK)
    sent = 0
    for subscription in ReportSubscription.objects.filter(due).select_related("user", "cluster"):
        sent += send_report_subscription(subscription, now=now)
    return sent
