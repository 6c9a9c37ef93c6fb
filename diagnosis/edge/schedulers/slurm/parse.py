"""Slurm's outputs in the snapshot's vocabulary: pure functions over what the commands print.

``sinfo --json`` and ``squeue --json`` (data parser v0.0.38 on Slurm 22.05; later parsers keep
most keys) are read by key, defensively: a missing or oddly typed field degrades to "unknown",
never to a crash. Text forms (``scontrol show partition -o``, ``sshare -P``, ``sacctmgr -P``)
are read by their stable ``key=value`` or ``|``-separated layouts. No I/O here: the adapter in
:mod:`diagnosis.edge.schedulers.slurm.adapter` runs the commands; tests feed recorded outputs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from diagnosis.edge.schedulers.base import SchedulerError

# -- small readers -------------------------------------------------------------------------------


def parse_json(text: str, command: str) -> dict[str, Any]:
    """A command's JSON document; a permanent SchedulerError naming the command otherwise."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SchedulerError(f"{command}: output is not JSON ({exc})", permanent=True) from None
    if not isinstance(document, dict):
        raise SchedulerError(f"{command}: expected a JSON object", permanent=True)
    errors = [_error_text(e) for e in document.get("errors") or [] if e]
    if errors:
        # Slurm 22.05 exits 0 with an "Unspecified error" here when slurmctld cannot be
        # reached (after its own retries): worth trying again later.
        raise SchedulerError(f"{command} reported: {'; '.join(errors)}", permanent=False)
    return document


def _error_text(error: Any) -> str:
    if not isinstance(error, Mapping):
        return str(error)
    parts = [str(error[k]) for k in ("source", "description", "error") if error.get(k)]
    number = error.get("error_number", error.get("errno"))
    return ": ".join(parts) + (f" (errno {number})" if number is not None else "")


def _int(value: Any) -> int | None:
    """Slurm's numbers: plain ints, or (newer parsers) ``{"set": true, "number": 5}``."""
    if isinstance(value, Mapping):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # newer parsers give some strings as lists (job_state)
        return ",".join(str(v) for v in value)
    return str(value)


def _flags(value: Any) -> set[str]:
    if isinstance(value, list):
        return {str(v).upper() for v in value}
    if isinstance(value, str) and value:
        return {v.upper() for v in re.split(r"[+,]", value) if v}
    return set()


def epoch_time(value: Any) -> str | None:
    """A Slurm epoch (seconds) as RFC 3339 UTC; None for 0, absent or nonsense."""
    seconds = _int(value)
    if not seconds or seconds <= 0 or seconds >= 253402300800:  # year 10000
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split on ``separator`` outside brackets and parentheses (``gpu:2(IDX:0,3),nic:1``)."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth = max(0, depth - 1)
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list (``n[1-2],gpu-[001-003,007]``) as names, in order."""
    names: list[str] = []
    for item in split_top_level(text or ""):
        names.extend(_expand_one(item))
    return names


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end() :]
    expanded: list[str] = []
    for piece in match.group(1).split(","):
        low, _, high = piece.partition("-")
        if high and low.isdigit() and high.isdigit():
            width = len(low) if low.startswith("0") else 0
            numbers = [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
        else:
            numbers = [piece]
        for number in numbers:
            expanded.extend(_expand_one(f"{prefix}{number}{suffix}"))
    return expanded


def expand_indexes(text: str) -> list[int]:
    """``0-2,5`` → [0, 1, 2, 5]; ``N/A`` or empty → []."""
    indexes: list[int] = []
    for piece in (text or "").split(","):
        low, _, high = piece.strip().partition("-")
        if not low.isdigit():
            continue
        if high.isdigit():
            indexes.extend(range(int(low), int(high) + 1))
        else:
            indexes.append(int(low))
    return indexes


# -- GRES ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gres:
    """One GRES item such as ``gpu:h100:3(IDX:2-4)``: name, type, count and indexes."""

    name: str
    type: str | None
    count: int
    indexes: tuple[int, ...] = ()


_GRES = re.compile(r"^(?P<body>[^()]*)(?:\((?P<extra>.*)\))?$")


def parse_gres(text: Any) -> list[Gres]:
    """Every item of a GRES string (``gpu:h100:8(S:0-1),nic:1``; ``gres:gpu:2``, ``gres/gpu=2``
    in TRES strings). ``(null)``, ``N/A`` and empty give []."""
    items: list[Gres] = []
    for raw in split_top_level(_text(text)):
        match = _GRES.match(raw)
        if match is None or raw in {"(null)", "N/A"}:
            continue
        body = match.group("body").replace("=", ":")
        if body.startswith(("gres:", "gres/")):
            body = body[5:]
        fields = [f for f in body.split(":") if f != ""]
        if not fields:
            continue
        name, rest = fields[0], fields[1:]
        count = 1
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        gres_type = rest[0] if rest else None
        indexes: tuple[int, ...] = ()
        extra = match.group("extra") or ""
        if extra.startswith("IDX:"):
            indexes = tuple(expand_indexes(extra[4:]))
        items.append(Gres(name, gres_type, count, indexes))
    return items


def gpu_count(text: Any, gres_name: str = "gpu") -> int:
    return sum(g.count for g in parse_gres(text) if g.name == gres_name)


def gpu_indexes(text: Any, gres_name: str = "gpu") -> list[int]:
    found: list[int] = []
    for item in parse_gres(text):
        if item.name == gres_name:
            found.extend(i for i in item.indexes if i not in found)
    return sorted(found)


def gpu_type(text: Any, gres_name: str = "gpu") -> str | None:
    """The GPU type of a node's GRES (the one with most GPUs when it has several)."""
    counts: dict[str, int] = {}
    for item in parse_gres(text):
        if item.name == gres_name and item.type:
            counts[item.type] = counts.get(item.type, 0) + item.count
    return max(counts, key=lambda t: counts[t]) if counts else None


# -- settings the parsers need -------------------------------------------------------------------


@dataclass(frozen=True)
class ParseSettings:
    gres_name: str = "gpu"
    gpu_models: Mapping[str, str] = field(default_factory=dict)  # GRES type -> model name
    partitions: frozenset[str] = frozenset()  # empty: every partition
    array_expand_limit: int = 1000


# -- nodes ---------------------------------------------------------------------------------------

DRAIN_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
DOWN_STATES = frozenset({"DOWN", "FUTURE", "UNKNOWN", "INVAL", "ERROR"})
BUSY_STATES = frozenset({"MIXED", "ALLOCATED", "COMPLETING"})


def node_state(record: Mapping[str, Any]) -> str:
    """``ready | cordoned | drained | down`` from a node's base state and flags.

    DRAIN on a node still running jobs (Slurm's "draining") is ``cordoned``: no new work, the
    running jobs go on; DRAIN with nothing left running is ``drained``.
    """
    base = _text(record.get("state")).upper()
    flags = _flags(record.get("state_flags"))
    if isinstance(record.get("state"), list):  # newer parsers: ["IDLE", "DRAIN"]
        states = _flags(record.get("state"))
        base = next((s for s in states if s not in DRAIN_FLAGS), "")
        flags |= states
    if base in DOWN_STATES or "DOWN" in flags:
        return "down"
    if flags & DRAIN_FLAGS:
        return "cordoned" if base in BUSY_STATES or "DRAINING" in flags else "drained"
    return "ready"


def node_pool(record: Mapping[str, Any], settings: ParseSettings) -> str | None:
    partitions = [str(p) for p in record.get("partitions") or [] if p]
    if settings.partitions:
        partitions = [p for p in partitions if p in settings.partitions]
        return partitions[0] if partitions else None
    return partitions[0] if partitions else "(none)"


def parse_nodes(document: Mapping[str, Any], settings: ParseSettings) -> list[dict[str, Any]]:
    """``sinfo --json`` → snapshot nodes (only nodes of the configured partitions, if any)."""
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in document.get("nodes") or []:
        if not isinstance(record, Mapping):
            continue
        name = _text(record.get("name") or record.get("hostname"))
        pool = node_pool(record, settings)
        if not name or name in seen or pool is None:
            continue
        seen.add(name)
        gres_type = gpu_type(record.get("gres"), settings.gres_name)
        node: dict[str, Any] = {
            "name": name,
            "pool": pool,
            "gpu_model": settings.gpu_models.get(gres_type or "", gres_type),
            "gpus": gpu_count(record.get("gres"), settings.gres_name),
            "state": node_state(record),
        }
        load, cpus = _int(record.get("cpu_load")), _int(record.get("cpus"))
        if load is not None and cpus:
            # cpu_load is the load average × 100; as a share of the node's CPUs, at most 1.
            node["cpu_util"] = round(min(1.0, max(0.0, load / 100 / cpus)), 4)
        nodes.append(node)
    return nodes


def node_drain(record: Mapping[str, Any]) -> tuple[str, int | None] | None:
    """(reason, epoch it was set) of a drained or draining node; None otherwise."""
    if node_state(record) not in {"drained", "cordoned"}:
        return None
    return _text(record.get("reason")), _int(record.get("reason_changed_at"))


# -- partitions ----------------------------------------------------------------------------------


def parse_key_values(line: str) -> dict[str, str]:
    """A ``scontrol show ... -o`` line as a dict. Values may contain spaces only when they are
    the last key's (``Reason=...``), which this keeps whole."""
    pairs: dict[str, str] = {}
    tokens = re.split(r"\s+(?=[A-Za-z][A-Za-z0-9_/:]*=)", line.strip())
    for token in tokens:
        key, sep, value = token.partition("=")
        if sep:
            pairs[key] = value
    return pairs


def parse_partitions(text: str) -> dict[str, dict[str, str]]:
    """``scontrol show partition -o`` → partition name → its settings."""
    partitions: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        pairs = parse_key_values(line)
        if "PartitionName" in pairs:
            partitions[pairs["PartitionName"]] = pairs
    return partitions


def placement_of(settings: Mapping[str, str]) -> str:
    """A partition's GPU placement: ``LLN=YES`` (least-loaded node first) spreads; otherwise
    Slurm's cons_tres best fit packs (binpack)."""
    return "spread" if settings.get("LLN", "NO").upper() == "YES" else "binpack"


# -- accounts (sshare, sacctmgr) -----------------------------------------------------------------

SSHARE_FIELDS = ("Cluster", "Account", "User", "RawShares", "NormShares", "RawUsage", "FairShare")
ASSOC_FIELDS = ("Cluster", "Account", "User", "Partition", "GrpTRES", "MaxTRES")


def parse_parsable(text: str, fields: Iterable[str]) -> list[dict[str, str]]:
    """``-P -n -o F1,F2`` output (``|``-separated, no header) as dicts, values stripped
    (sshare indents accounts by depth)."""
    names = list(fields)
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split("|")]
        rows.append(dict(zip(names, values + [""] * (len(names) - len(values)), strict=False)))
    return rows


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def parse_queues(
    sshare_text: str, assoc_text: str | None, gres_name: str = "gpu"
) -> list[dict[str, Any]]:
    """Accounts as queues: ``fairshare`` (sshare's RawShares) as weight, the account's
    ``GrpTRES`` GPU limit (sacctmgr) as capability. The ``root`` account is left out."""
    limits: dict[str, float] = {}
    for row in parse_parsable(assoc_text or "", ASSOC_FIELDS):
        if row.get("User") or row.get("Partition") or not row.get("Account"):
            continue
        limit = tres_gpus(row.get("GrpTRES", ""), gres_name)
        if limit is not None:
            limits[row["Account"]] = limit
    queues: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in parse_parsable(sshare_text, SSHARE_FIELDS):
        account = row.get("Account", "")
        if row.get("User") or not account or account == "root" or account in seen:
            continue
        seen.add(account)
        queue: dict[str, Any] = {"name": account, "tenant": account}
        shares = _number(row.get("RawShares", ""))
        if shares is not None:
            queue["weight"] = shares
        if account in limits:
            queue["capability_gpus"] = limits[account]
        queues.append(queue)
    return queues


def tres_gpus(text: str, gres_name: str = "gpu") -> float | None:
    """The GPU count of a TRES string (``cpu=8,gres/gpu=4`` or typed ``gres/gpu:h100=4``)."""
    total: float | None = None
    for item in (text or "").split(","):
        key, _, value = item.partition("=")
        if key == f"gres/{gres_name}" or key.startswith(f"gres/{gres_name}:"):
            number = _number(value)
            if number is not None:
                total = (total or 0) + number
    return total


# -- jobs ----------------------------------------------------------------------------------------

JOB_STATES = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RUNNING": "running",
    "CONFIGURING": "running",
    "COMPLETING": "running",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "SIGNALING": "running",
    "RESIZING": "running",
    "STAGE_OUT": "running",
    "COMPLETED": "completed",
    "PREEMPTED": "preempted",
    # Every other end (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, BOOT_FAIL, DEADLINE,
    # OUT_OF_MEMORY, SPECIAL_EXIT, REVOKED) is a failure to finish the work.
}
ENDED = frozenset({"completed", "failed", "preempted"})


def job_state(record: Mapping[str, Any]) -> tuple[str, str]:
    """(snapshot state, Slurm's own state word) of a job record."""
    raw = record.get("job_state")
    words = [str(w).upper() for w in raw] if isinstance(raw, list) else [_text(raw).upper()]
    native = next((w for w in words if w), "UNKNOWN")
    return JOB_STATES.get(native, "failed"), native


def job_id(record: Mapping[str, Any]) -> str:
    """``123``; an array task ``123_4``; a heterogeneous job component ``123+1``."""
    array_job = _int(record.get("array_job_id"))
    task = _int(record.get("array_task_id"))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    het = _int(record.get("het_job_id"))
    if het:
        return f"{het}+{_int(record.get('het_job_offset')) or 0}"
    return str(_int(record.get("job_id")) or _text(record.get("job_id")))


def array_tasks(record: Mapping[str, Any]) -> list[int]:
    """The task numbers of an array's pending meta-record (``0-5%2`` → 0..5)."""
    text = _text(record.get("array_task_string")).split("%")[0]
    tasks: list[int] = []
    for piece in text.split(","):
        low, _, rest = piece.partition("-")
        high, _, step = rest.partition(":")
        if not low.isdigit():
            continue
        stop = int(high) if high.isdigit() else int(low)
        tasks.extend(range(int(low), stop + 1, int(step) if step.isdigit() else 1))
    return tasks


def _allocation(record: Mapping[str, Any], gres_name: str) -> list[tuple[str, list[int]]]:
    """(node, GPU indexes) for each allocated node, in Slurm's order (gres_detail is parallel
    to the job's allocated nodes)."""
    resources = record.get("job_resources") or {}
    nodes = [
        _text(n.get("nodename"))
        for n in (resources.get("allocated_nodes") or [])
        if isinstance(n, Mapping)
    ]
    if not nodes or not all(nodes):
        nodes = expand_hostlist(_text(resources.get("nodes") or record.get("nodes")))
    details = [d for d in record.get("gres_detail") or [] if isinstance(d, str)]
    pairs = []
    for node, detail in zip(nodes, details, strict=False):
        indexes = gpu_indexes(detail, gres_name)
        if indexes:
            pairs.append((node, indexes))
    return pairs


def _requested_gpus(record: Mapping[str, Any], gres_name: str) -> tuple[int, int]:
    """(pods, gpus per pod) a job asks for: one pod per node."""
    nodes = max(1, _int(record.get("node_count")) or 1)
    per_node = gpu_count(record.get("tres_per_node"), gres_name)
    if per_node:
        return nodes, per_node
    total = gpu_count(record.get("tres_per_job"), gres_name)
    per_task = gpu_count(record.get("tres_per_task"), gres_name)
    if per_task:
        total = per_task * max(1, _int(record.get("tasks")) or 1)
    if not total:
        return nodes, 0
    if total % nodes == 0:
        return nodes, total // nodes
    return total, 1  # uneven over its nodes: one-GPU pods


def _split_pods(
    allocation: list[tuple[str, list[int]]],
) -> tuple[int, int, list[dict[str, Any]]]:
    """Pods of equal size from per-node GPU lists (one pod per node when even, else the
    greatest common size)."""
    size = 0
    for _, indexes in allocation:
        size = math.gcd(size, len(indexes))
    pods = [
        {"node": node, "gpus": indexes[start : start + size]}
        for node, indexes in allocation
        for start in range(0, len(indexes), size)
    ]
    return len(pods), size, pods


@dataclass
class ParsedJobs:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    native: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> facts for events
    truncated_arrays: list[str] = field(default_factory=list)


def parse_jobs(document: Mapping[str, Any], settings: ParseSettings) -> ParsedJobs:
    """``squeue --json`` → snapshot jobs; pending array meta-records expand into their tasks
    (at most ``array_expand_limit`` each; the arrays cut short are listed)."""
    parsed = ParsedJobs()
    for record in document.get("jobs") or []:
        if not isinstance(record, Mapping):
            continue
        for job, facts in _jobs_of(record, settings, parsed):
            if job["id"] in parsed.native:
                continue
            parsed.jobs.append(job)
            parsed.native[job["id"]] = facts
    return parsed


def _jobs_of(
    record: Mapping[str, Any], settings: ParseSettings, parsed: ParsedJobs
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    partition = split_top_level(_text(record.get("partition")))
    pool = partition[0] if partition else None
    if settings.partitions and pool not in settings.partitions:
        return
    state, native = job_state(record)
    pods, per_pod = _requested_gpus(record, settings.gres_name)
    allocation: list[dict[str, Any]] = []
    if state == "running":
        bound = _allocation(record, settings.gres_name)
        if bound:
            pods, per_pod, allocation = _split_pods(bound)
    account = _text(record.get("account"))
    tenant = account or _text(record.get("user_name")) or None
    reason = _text(record.get("state_reason"))
    pending_reason = reason if state == "pending" and reason not in {"", "None"} else None
    submitted = epoch_time(record.get("submit_time"))
    ran = state != "pending" and bool(_text(record.get("nodes")) or allocation)
    job: dict[str, Any] = {
        "id": job_id(record),
        "name": _text(record.get("name")) or None,
        "tenant": tenant,
        "queue": tenant,
        "pool": pool,
        "kind": None,
        "priority": _int(record.get("priority")) or 0,
        "state": state,
        "submitted": submitted,
        # A job cancelled while pending gets start = end = the cancel time, but no nodes.
        "started": epoch_time(record.get("start_time")) if ran else None,
        "ended": epoch_time(record.get("end_time")) if state in ENDED else None,
        "pods": pods,
        "gpus_per_pod": per_pod,
        "gang": pods > 1,
        "min_member": pods,
        "allocation": allocation,
        "pending_reason": pending_reason,
        "preemptions": _int(record.get("restart_cnt")) or 0,
    }
    facts = {
        "native_state": native,
        "reason": reason,
        "description": _text(record.get("state_description")),
        "submit_epoch": _int(record.get("submit_time")) or 0,
        "start_epoch": (_int(record.get("start_time")) or 0) if ran else 0,
        "end_epoch": _int(record.get("end_time")) or 0,
        "nodes": _text(record.get("nodes")),
        "exit_code": _int(record.get("exit_code")),
    }
    if submitted is None:
        return  # a record without a submit time is not a job we can place in time
    array_job = _int(record.get("array_job_id"))
    if array_job and _int(record.get("array_task_id")) is None and record.get("array_task_string"):
        tasks = array_tasks(record)
        if len(tasks) > settings.array_expand_limit:
            parsed.truncated_arrays.append(str(array_job))
            tasks = tasks[: settings.array_expand_limit]
        for task in tasks:
            yield {**job, "id": f"{array_job}_{task}"}, facts
        return
    yield job, facts


# -- events --------------------------------------------------------------------------------------

CURSOR_VERSION = 1
ENDED_KINDS = {"completed": "completed", "failed": "failed", "preempted": "preempted"}


@dataclass(frozen=True)
class EventCursor:
    """Where the previous read stopped: its time (epoch s) and the pending reason it saw for each
    pending job (a reason is reported again only when it changes)."""

    time: int | None = None
    pending: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> EventCursor:
        """The cursor stored last time; a missing or unreadable one starts afresh."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION:
            return cls()
        pending = data.get("pending")
        return cls(
            time=_int(data.get("t")),
            pending={str(k): str(v) for k, v in pending.items()}
            if isinstance(pending, dict)
            else {},
        )

    def dump(self) -> str:
        return json.dumps(
            {"v": CURSOR_VERSION, "t": self.time, "pending": dict(self.pending)},
            separators=(",", ":"),
            sort_keys=True,
        )


def _event(
    epoch: int, kind: str, key: str, *, job=None, node=None, reason="", message=""
) -> dict[str, Any]:
    return {
        "time": epoch_time(epoch),
        "kind": kind,
        "job": job,
        "node": node,
        "reason": reason,
        "message": message,
        "dedup_key": key,
    }


def derive_events(
    jobs: ParsedJobs,
    nodes_document: Mapping[str, Any],
    cursor: EventCursor,
    *,
    now: int,
    overlap_s: int = 300,
) -> tuple[list[dict[str, Any]], EventCursor]:
    """Slurm keeps no event stream; events are read off job and node records.

    - ``submitted``/``started``/``completed``/``failed``/``preempted`` at the job's own times
      (the reason keeps Slurm's state word, e.g. ``CANCELLED``, ``TIMEOUT``), for times since
      the cursor (less ``overlap_s`` for clock skew; dedup keys absorb the repeats);
    - ``failed_scheduling`` when a pending job shows a reason it did not show last time
      (``Resources``, ``Priority``, ``Dependency``, ``QOSMaxGRESPerUser``, ``AssocGrpGRES``,
      ``ReqNodeNotAvail``, ...), at the time it was seen, with Slurm's description as message;
    - ``node_drained`` for a drained or draining node, at the time its reason was set.
    """
    since = None if cursor.time is None else cursor.time - overlap_s
    events: list[dict[str, Any]] = []
    pending: dict[str, str] = {}

    def recent(epoch: int) -> bool:
        return epoch > 0 and (since is None or epoch >= since)

    for job in jobs.jobs:
        ident = job["id"]
        facts = jobs.native[ident]
        native = facts["native_state"]
        if recent(facts["submit_epoch"]):
            events.append(
                _event(
                    facts["submit_epoch"],
                    "submitted",
                    f"job:{ident}:submitted:{facts['submit_epoch']}",
                    job=ident,
                    reason="Submitted",
                    message=f"job {ident} submitted to partition {job['pool']}",
                )
            )
        if recent(facts["start_epoch"]):
            events.append(
                _event(
                    facts["start_epoch"],
                    "started",
                    f"job:{ident}:started:{facts['start_epoch']}",
                    job=ident,
                    reason="Started",
                    message=f"job {ident} started on {facts['nodes'] or '?'}",
                )
            )
        if job["state"] in ENDED_KINDS and recent(facts["end_epoch"]):
            exit_code = facts["exit_code"]
            detail = f" (exit code {exit_code >> 8}:{exit_code & 0xFF})" if exit_code else ""
            events.append(
                _event(
                    facts["end_epoch"],
                    ENDED_KINDS[job["state"]],
                    f"job:{ident}:{native}:{facts['end_epoch']}",
                    job=ident,
                    reason=native,
                    message=f"job {ident} ended {native}{detail}",
                )
            )
        reason = job["pending_reason"]
        if reason:
            pending[ident] = reason
            if cursor.pending.get(ident) != reason:
                message = facts["description"] or f"job {ident} pending: {reason}"
                events.append(
                    _event(
                        now,
                        "failed_scheduling",
                        f"job:{ident}:pending:{reason}:{now}",
                        job=ident,
                        reason=reason,
                        message=message,
                    )
                )
    for record in nodes_document.get("nodes") or []:
        if not isinstance(record, Mapping):
            continue
        drain = node_drain(record)
        name = _text(record.get("name"))
        if drain is None or not name:
            continue
        reason, changed = drain
        by = _text(record.get("reason_set_by_user"))
        state = node_state(record)
        events.append(
            _event(
                changed or now,
                "node_drained",
                f"node:{name}:drain:{changed or reason}",
                node=name,
                reason=reason or "DRAIN",
                message=f"node {name} {'draining' if state == 'cordoned' else 'drained'}"
                + (f" by {by}" if by else "")
                + (f": {reason}" if reason else ""),
            )
        )
    events.sort(key=lambda e: (e["time"], e["dedup_key"]))
    return events, EventCursor(time=now, pending=pending)
