"""Links to gpuobs's pages, human labels for evidence keys, and advice Markdown.

``{% load links %}`` in a template:

- ``{% link "job" job_id cluster %}`` (also ``tenant``, ``queue``, ``node``, ``gpu`` -- the value
  ``node/index`` --, ``finding``, ``recommendation``, ``incident`` with the id, and ``label=`` for
  the text): the one way a page names something that has a page of its own. A hidden name (the
  placeholder of another tenant's job, ``diagnosis.access.HIDDEN_JOB``) or an empty one is
  plain text, never a link.
- ``{{ finding.subject|subject_link:cluster }}``: a finding's subject (``job:…``, ``node:…``,
  ``gpu:node/index``, ``tenant:…``, ``pool:…``) as a link.
- ``{{ text|markdown }}``: rule advice and recommendation text as safe HTML (markdown-it-py,
  CommonMark with raw HTML off, so ``<script>`` stays text; links only http(s), mailto and
  same-site paths).

Evidence tables (``{% evidence_table evidence cluster %}``, ``diagnosis/templatetags/gpuobs.py``)
use :func:`evidence_label`, :func:`evidence_link` and :func:`unit_of` from here.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _
from markdown_it import MarkdownIt

from diagnosis.access import summary_for_user, text_for_user

register = template.Library()

# URL name and how the value becomes its URL arguments, per kind of thing.
_ROUTES: dict[str, str] = {
    "job": "diagnosis:job",
    "tenant": "diagnosis:tenant",
    "queue": "diagnosis:queue",
    "node": "diagnosis:node",
    "gpu": "diagnosis:gpu",
    "finding": "diagnosis:finding",
    "recommendation": "diagnosis:recommendation",
    "incident": "diagnosis:incident",
}
_ID_KWARGS = {
    "job": "job_id",
    "tenant": "tenant",
    "queue": "queue",
    "node": "node",
    "finding": "finding_id",
    "recommendation": "recommendation_id",
    "incident": "incident_id",
}
_INTEGER_KINDS = frozenset({"finding", "recommendation", "incident"})


def _cluster_name(cluster: Any) -> str:
    return str(getattr(cluster, "name", cluster) or "")


_PLACEHOLDER = "gpuobs-value-placeholder"
_URL_SAFE = "!$&'()*+,;=" + "/~:@"  # what reverse() leaves unquoted (RFC 3986 sub-delims + /~:@)
_PATH_KINDS = frozenset({"job", "tenant"})  # routed by <path:…>: a "/" in the name is fine


@lru_cache(maxsize=256)
def _url_parts(kind: str, cluster_name: str) -> tuple[str, str]:
    """The page URL of a ``kind`` in ``cluster_name`` around its name: reverse() once per kind
    and cluster, not once per link (a list of 50 jobs shows 150 links)."""
    url = reverse(_ROUTES[kind], kwargs={"name": cluster_name, _ID_KWARGS[kind]: _PLACEHOLDER})
    head, _sep, tail = url.partition(_PLACEHOLDER)
    return head, tail


def url_of(kind: str, value: Any, cluster: Any) -> str | None:
    """The page of ``value`` (a ``kind`` of thing) in ``cluster``, or None when it has none."""
    text = "" if value is None else str(value).strip()
    name = _cluster_name(cluster)
    if not text or not name or kind not in _ROUTES or text.startswith("("):
        return None  # nothing, or a placeholder such as "(another tenant's job)"
    try:
        if kind == "gpu":
            node, _sep, index = text.rpartition("/")
            if not node or not index.isdigit():
                return None
            return reverse(_ROUTES[kind], kwargs={"name": name, "node": node, "index": int(index)})
        if kind in _INTEGER_KINDS:
            if not text.isdigit():
                return None
            return reverse(_ROUTES[kind], kwargs={"name": name, _ID_KWARGS[kind]: int(text)})
    except NoReverseMatch:  # a node name a URL cannot carry (e.g. with a slash)
        return None
    if "/" in text and kind not in _PATH_KINDS:
        return None
    head, tail = _url_parts(kind, name)
    return f"{head}{quote(text, safe=_URL_SAFE)}{tail}"


@register.simple_tag
def link(kind: str, value: Any, cluster: Any, label: Any = None) -> SafeString:
    """``<a class="ref ref-KIND" href="…">label</a>``, or the escaped label without a page."""
    text = value if label is None else label
    if label is None and kind in ("incident", "recommendation"):
        text = f"#{value}"
    url = url_of(kind, value, cluster)
    if url is None:
        return escape("" if text is None else text)
    return format_html('<a class="ref ref-{}" href="{}">{}</a>', kind, url, text)


@register.filter
def gpu_ref(node: Any, index: Any) -> str:
    """``{{ node|gpu_ref:index }}`` → ``node/index``, the value ``{% link "gpu" … %}`` takes."""
    return f"{node}/{index}"


_SUBJECT_KINDS = {"job": "job", "node": "node", "gpu": "gpu", "tenant": "tenant", "queue": "queue"}


@register.filter
def subject_link(subject: Any, cluster: Any) -> SafeString:
    """A finding's subject (or a recommendation's target) with its name linked:
    ``job:<a>job-17</a>``, ``queue:…``, ``node:…``; a pool to its findings."""
    text = str(subject or "")
    prefix, sep, name = text.partition(":")
    if not sep:
        return escape(text)
    if prefix == "pool" and _cluster_name(cluster):
        url = reverse("diagnosis:findings", kwargs={"name": _cluster_name(cluster)})
        return format_html('pool:<a class="ref ref-pool" href="{}?pool={}">{}</a>', url, name, name)
    if prefix == "jobs":  # a set of jobs (a gang deadlock): each member linked
        members = [link("job", member, cluster) for member in name.split("+")]
        return format_html("jobs:{}", mark_safe("+".join(members)))  # noqa: S308 - each escaped
    kind = _SUBJECT_KINDS.get(prefix)
    if kind is None:
        return escape(text)
    return format_html("{}:{}", prefix, link(kind, name, cluster))


# -- evidence keys -------------------------------------------------------------------------------

# Human labels of the evidence keys the built-in rules write (docs/rules.md lists them per rule).
# A key missing here is shown as its words ("free_pod_slots" -> "Free pod slots").
EVIDENCE_LABELS: dict[str, Any] = {
    # a static impact's figures (a gang release: diagnosis/core/recommend/builtin/gang_release.py)
    "gpus_released": _("GPUs released"),
    "gpus_unblocked": _("GPUs of the other gangs unblocked"),
    "gpus_involved": _("GPUs involved"),
    "idle_gpu_hours_at_most": _("GPU-hours held idle so far (at most)"),
    "util_mean": _("Mean GPU utilization"),
    "util": _("GPU utilization"),
    "util_spread": _("Utilization spread"),
    "held_util_mean": _("Mean utilization of the held GPUs"),
    "max_util": _("Highest utilization"),
    "fb_used_frac": _("Framebuffer used"),
    "fb_used_frac_mean": _("Mean framebuffer used"),
    "tensor_active_mean": _("Mean tensor-core activity"),
    "runtime_s": _("Running for"),
    "wait_s": _("Waiting for"),
    "hold_s": _("Holding GPUs for"),
    "held_since": _("Holding GPUs since"),
    "gpus": _("GPUs"),
    "gpus_held": _("GPUs held"),
    "gpus_with_util": _("GPUs reporting utilization"),
    "gpus_per_pod": _("GPUs per pod"),
    "gpus_per_node": _("GPUs per node"),
    "request_gpus": _("GPUs requested"),
    "pool_free_gpus": _("Free GPUs in the pool"),
    "pool_gpus": _("GPUs in the pool"),
    "free_gpus": _("Free GPUs"),
    "free_pod_slots": _("Free pod slots"),
    "free_per_node_histogram": _("Nodes by free GPUs"),
    "frag_ratio": _("Fragmentation ratio"),
    "largest_blocked_pod_gpus": _("Largest blocked pod (GPUs)"),
    "unhealthy_gpus": _("Unhealthy GPUs"),
    "nodes_not_ready": _("Nodes not ready"),
    "per_gpu": _("Per GPU"),
    "job": _("Job"),
    "jobs": _("Jobs"),
    "job_ids": _("Jobs"),
    "tenant": _("Tenant"),
    "tenants": _("Tenants"),
    "tenant_held_gpus": _("GPUs the tenant holds"),
    "tenant_deserved_gpus": _("GPUs the tenant deserves"),
    "queue": _("Queue"),
    "pool": _("Pool"),
    "node": _("Node"),
    "nodes": _("Nodes"),
    "nodes_used": _("Nodes used"),
    "node_state": _("Node state"),
    "gpu": _("GPU"),
    "index": _("GPU index"),
    "uuid": _("UUID"),
    "kind": _("Kind"),
    "priority": _("Priority"),
    "pods": _("Pods"),
    "pod": _("Pod"),
    "min_member": _("Gang minimum"),
    "missing_pods": _("Pods still missing"),
    "tp": _("Tensor-parallel size"),
    "tp_groups": _("Tensor-parallel groups"),
    "tp_groups_crossing": _("TP groups crossing nodes"),
    "tp_groups_crossing_count": _("TP groups crossing nodes"),
    "pods_crossing_nvlink": _("Pods crossing NVLink domains"),
    "pods_crossing_nvlink_count": _("Pods crossing NVLink domains"),
    "pods_crossing_numa": _("Pods crossing NUMA nodes"),
    "pods_crossing_numa_count": _("Pods crossing NUMA nodes"),
    "mfu": _("MFU"),
    "min_mfu": _("MFU threshold"),
    "method": _("Method"),
    "peak_tflops": _("Peak TFLOP/s"),
    "overtaken_by": _("Overtaken by"),
    "overtakers": _("Jobs that overtook it"),
    "overtakers_higher_priority": _("Overtakers of higher priority"),
    "overtakers_median_request_gpus": _("Median GPUs of the overtakers"),
    "placement_policy": _("Placement policy"),
    "xid_count": _("Xid errors"),
    "window_start": _("Window start"),
    "window_end": _("Window end"),
    "host_cpu_max": _("Highest host CPU"),
    "thresholds": _("Thresholds"),
    "members": _("Members"),
    "note": _("Note"),
    "meaning": _("Meaning"),
    "gpu_model": _("GPU model"),
    "gpu_health": _("GPU health"),
    "health": _("Health"),
    "nvlink_domain": _("NVLink domain"),
    "numa": _("NUMA node"),
}

# Keys whose values are names of things with a page (lists of them too).
LINKED_KEYS: dict[str, str] = {
    "job": "job",
    "jobs": "job",
    "job_ids": "job",
    "overtaken_by": "job",
    "overtakers": "job",
    "members": "job",
    "tenant": "tenant",
    "tenants": "tenant",
    "queue": "queue",
    "node": "node",
    "nodes": "node",
    "nodes_used": "node",
    "nodes_not_ready": "node",
}
# Inside a record under one of these keys, ``id`` is a job id.
JOB_RECORD_KEYS = frozenset({"jobs", "overtakers", "members", "job", "per_job", "blocked_jobs"})

_FRACTION_KEYS = re.compile(r"(^|_)(util|frac|mfu|tensor_active|share|ratio)(_|$)")
_UNIT_SUFFIXES = (
    ("_mhz", "MHz"),
    ("_w", "W"),
    ("_c", "°C"),
    ("_bps", "B/s"),
    ("_pct", "%"),
    ("_tflops", "TFLOP/s"),
)


def evidence_label(key: Any) -> str:
    """The evidence key as people read it (``util_mean`` → ``Mean GPU utilization``)."""
    text = str(key)
    label = EVIDENCE_LABELS.get(text)
    if label is not None:
        return str(label)
    words = text.replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else text


def evidence_link(key: Any, parent: Any = None) -> str | None:
    """The kind of page a value under ``key`` names (``job``, ``node``…), or None.
    ``parent`` is the key of the record holding ``key`` (an ``id`` inside ``jobs`` is a job)."""
    kind = LINKED_KEYS.get(str(key))
    if kind is None and str(key) == "id" and str(parent) in JOB_RECORD_KEYS:
        kind = "job"
    return kind


def unit_of(key: Any) -> str:
    """How a number under ``key`` is shown: ``fraction`` (as a percent), ``seconds``, a unit
    (``W``, ``°C``, ``MHz``…) or ``""``."""
    text = str(key).lower()
    if text.endswith("_s"):
        return "seconds"
    if text.endswith("_count") or text.endswith("_gpus") or text == "gpus":
        return ""
    for suffix, unit in _UNIT_SUFFIXES:
        if text.endswith(suffix):
            return unit
    if _FRACTION_KEYS.search(text):
        return "fraction"
    return ""


# -- Markdown ------------------------------------------------------------------------------------

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_SAFE_LINK = re.compile(r"^(https?:|mailto:|/(?!/)|#)", re.IGNORECASE)


def _validate_link(url: str) -> bool:
    return bool(_SAFE_LINK.match(url.strip()))


_MARKDOWN.validateLink = _validate_link
# One line of text that may carry names from the scheduler (a recommendation's advice): code
# spans and emphasis, never links or images, so a job called "[x](https://…)" stays text.
_INLINE = MarkdownIt("commonmark", {"html": False}).disable(["link", "image", "autolink"])


@register.filter
def markdown(text: Any) -> SafeString:
    """Markdown as HTML: raw HTML in the text is escaped (``html: False``), links other than
    http(s), mailto and same-site ones are left as text."""
    if text is None or text == "":
        return mark_safe("")
    return mark_safe(_MARKDOWN.render(str(text)))  # noqa: S308 - markdown-it escapes all text


@register.filter
def markdown_inline(text: Any) -> SafeString:
    """One line of Markdown without the ``<p>`` around it (rule docs, advice): code spans and
    emphasis; links and images stay text."""
    if text is None or text == "":
        return mark_safe("")
    return mark_safe(_INLINE.renderInline(str(text)))  # noqa: S308 - as above


@register.simple_tag(takes_context=True)
def summary_of(context: template.Context, finding: Any) -> str:
    """A finding's summary as the page's reader may read it: in the page's language (its stored
    template translated, :func:`diagnosis.access.summary_for_user`), a manager reading another
    tenant's job or tenant named in it as the placeholder; escaped like any variable."""
    request = context.get("request")
    user = request.user if request is not None else None
    return summary_for_user(user, getattr(finding, "cluster_id", None), finding)


@register.simple_tag(takes_context=True)
def reader_text(context: template.Context, text: Any, cluster: Any = None) -> str:
    """Free text about jobs (an incident's summary or timeline entry, a note, a scheduler
    event's reason or message) as the page's reader may read it, for the page's ``cluster``
    (or the one given): :func:`diagnosis.access.text_for_user`, escaped like any variable."""
    cluster = cluster if cluster is not None else context.get("cluster")
    return _for_reader(context, text, getattr(cluster, "pk", None))


def _for_reader(context: template.Context, text: Any, cluster_id: int | None) -> str:
    request = context.get("request")
    text = "" if text is None else str(text)
    if request is None or cluster_id is None:
        return text
    return text_for_user(request.user, cluster_id, text)
