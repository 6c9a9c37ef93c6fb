"""What a stored start-time forecast says, in the reader's language and scope: the blocking
cause and what would unblock it (docs/forecasts.md "Blocking causes"), for the pages and the
API alike. The core gives a cause's kind and figures; the sentences are made here."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _

from diagnosis.access import User, text_for_user
from diagnosis.models import JobForecast


def cause_text(kind: str, f: dict[str, Any]) -> str:
    """Why the job waits."""
    if kind == "partial-gang":
        return _(
            "It holds %(bound)s of the %(min)s pods it needs (%(held)s GPUs) and waits for "
            "%(missing)s GPUs more; %(free)s are free."
        ) % {
            "bound": f.get("bound_pods"),
            "min": f.get("min_member"),
            "held": f.get("held_gpus"),
            "missing": f.get("missing_gpus"),
            "free": f.get("free_gpus"),
        }
    if kind == "quota":
        return _(
            "Queue %(queue)s holds %(held)s of its %(cap)s-GPU capability; this job's "
            "%(request)s GPUs would pass it."
        ) % {
            "queue": f.get("queue"),
            "held": f.get("queue_held_gpus"),
            "cap": f.get("capability_gpus"),
            "request": f.get("request_gpus"),
        }
    if kind == "too-big":
        return _("It asks for %(request)s GPUs; pool %(pool)s has %(pool_gpus)s in all.") % {
            "request": f.get("request_gpus"),
            "pool": f.get("pool"),
            "pool_gpus": f.get("pool_gpus"),
        }
    if kind == "fragmentation":
        return _(
            "%(free)s GPUs are free in pool %(pool)s, but scattered: no nodes fit its "
            "%(pods)s pod(s) of %(size)s GPUs."
        ) % {
            "free": f.get("free_gpus"),
            "pool": f.get("pool"),
            "pods": f.get("pods"),
            "size": f.get("gpus_per_pod"),
        }
    if kind == "partial-gangs":
        return _(
            "It needs %(request)s GPUs and %(free)s are free; partial gangs (%(gangs)s) hold "
            "%(held)s more."
        ) % {
            "request": f.get("request_gpus"),
            "free": f.get("free_gpus"),
            "gangs": ", ".join(f.get("gangs") or ()),
            "held": f.get("held_gpus"),
        }
    if kind == "order":
        return _(
            "It fits on the free GPUs now; %(ahead)s job(s) come before it in the queue order."
        ) % {"ahead": f.get("jobs_ahead", 0)}
    if f:
        return _("It needs %(request)s GPUs and %(free)s are free in pool %(pool)s.") % {
            "request": f.get("request_gpus"),
            "free": f.get("free_gpus"),
            "pool": f.get("pool"),
        }
    return _("It waits for GPUs held by running jobs.")


def unblock_text(kind: str, f: dict[str, Any]) -> str:
    """What would make it start sooner."""
    if kind == "partial-gang":
        return _("Release the gang (gang-release) or admit it all-or-nothing.")
    if kind == "quota":
        return _("Grow the capability of queue %(queue)s by %(grow)s GPUs.") % {
            "queue": f.get("queue"),
            "grow": f.get("grow_by_gpus"),
        }
    if kind == "too-big":
        return _("Shrink the request, or send it to a larger pool.")
    if kind == "fragmentation":
        return _(
            "Binpack placement in pool %(pool)s would pack the free GPUs onto whole nodes."
        ) % {"pool": f.get("pool")}
    if kind == "partial-gangs":
        return _("Release the partial gangs holding GPUs in pool %(pool)s.") % {
            "pool": f.get("pool")
        }
    if kind == "order":
        return _("Nothing but the scheduler's next pass, or a higher priority.")
    return _("%(short)s more GPUs freed by running jobs ending (the forecast's wait).") % {
        "short": f.get("short_gpus", "?")
    }


def forecast_view(user: User, forecast: JobForecast, cluster_name: str) -> dict[str, Any]:
    """A forecast as a page or the API shows it to ``user``: figures, cause and remedy (texts
    through the reader's scope), and the linked finding's and recommendation's addresses."""
    figures = dict(forecast.figures or {})
    if figures.get("gangs"):
        figures["gangs"] = [text_for_user(user, forecast.cluster_id, g) for g in figures["gangs"]]
    job = forecast.job
    return {
        "job": job.external_id,
        "as_of": forecast.as_of,
        "start_at": forecast.start_at,
        "low_at": forecast.low_at,
        "high_at": forecast.high_at,
        "predicted_wait_s": forecast.predicted_wait_s,
        "horizon_s": forecast.horizon_s,
        "seeds": forecast.seeds,
        "started_in": forecast.started_in,
        "cause": forecast.cause,
        "figures": figures,
        "cause_text": text_for_user(user, forecast.cluster_id, cause_text(forecast.cause, figures)),
        "unblock_text": unblock_text(forecast.cause, figures),
        "finding": forecast.finding_id,
        "finding_url": (
            reverse(
                "diagnosis:finding",
                kwargs={"name": cluster_name, "finding_id": forecast.finding_id},
            )
            if forecast.finding_id
            else None
        ),
        "recommendation": forecast.recommendation_id,
        "recommendation_url": (
            reverse(
                "diagnosis:recommendation",
                kwargs={"name": cluster_name, "recommendation_id": forecast.recommendation_id},
            )
            if forecast.recommendation_id
            else None
        ),
    }
