"""The Slurm scheduler adapter: reads with ``sinfo``/``squeue``/``scontrol`` (and ``sshare``/
``sacctmgr`` when accounting is on), writes with ``scontrol update`` and ``sacctmgr -i``.

Partitions are pools; accounts are tenants and queues (``fairshare`` as weight, a ``GrpTRES``
GPU limit as capability); GRES ``gpu`` with its indexes gives the allocation; multi-node jobs
are gangs; pending array tasks are expanded. A cluster's ``scheduler_config``::

    {"slurm_conf": "/etc/slurm/slurm.conf",  # SLURM_CONF for every command
     "timeout_s": 10,                        # per command
     "accounting": true,                     # read sshare/sacctmgr; allow queue-weight changes
     "partitions": ["gpu"],                  # only these pools (default: every partition)
     "gpu_models": {"h100": "H100-SXM5-80GB"},  # GRES type -> GPU model name
     "gres_name": "gpu", "array_expand_limit": 1000, "event_overlap_s": 300}

Every command runs from an argument list (never a shell) with a timeout; a failure becomes a
:class:`SchedulerError` carrying the command's stderr, transient for timeouts and an unreachable
controller, permanent otherwise (bad config, unknown partition or node).

One cycle is one bounded set of reads: ``read_state`` runs ``sinfo --json``, ``squeue --json``,
``scontrol show partition -o`` (+ ``sshare``, ``sacctmgr show associations``), and a
``read_events`` right after it on the same adapter derives the events from those same reads.
With ``"transport": "slurmrestd"`` (``rest_url``, ``rest_token_env``, ``rest_version``) the
nodes, jobs and partitions come from slurmrestd instead, through the same parsers
(:mod:`.restd`); that transport only reads.

GPU topology (``read_topology``, on by default) comes from the files beside ``slurm.conf``
where this host can read them: ``gres.conf`` ``Links=``/``Cores=`` give each node's NVLink
domains and GPU sockets, and with ``nvlink_blocks`` the base blocks of ``topology.yaml`` /
``topology.conf`` are cluster-wide NVLink domains (:mod:`.topology`). Absent: not judged.
"""

# long module: one scheduler's reads (a bounded set of commands a cycle) and every change it
# writes (scontrol, sacctmgr), each write with its read-back; split, they would share most names.
from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from diagnosis.edge.config import ConfigSpec, Setting
from diagnosis.edge.schedulers.base import (
    Capabilities,
    ChangeResult,
    EventBatch,
    GangAdvice,
    SchedulerError,
    SchedulerState,
    parse_config,
)
from diagnosis.edge.schedulers.slurm import parse, restd
from diagnosis.edge.schedulers.slurm import topology as slurm_topology
from diagnosis.edge.schedulers.slurm.parse import tres as slurm_tres
from diagnosis.edge.schedulers.targets import target_name

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
STDERR_LIMIT = 2000
REFUSED_SHOWN = 100  # records left out that a read names (the log has the count)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
# Failures that may pass by themselves: the controller or slurmdbd unreachable or slow.
TRANSIENT = re.compile(
    r"unable to contact slurm controller|connection refused|connection timed out|"
    r"socket timed out|timed out|zero bytes were transmitted|unable to connect|"
    r"communication connection failure|transport endpoint|resource temporarily unavailable|"
    r"slurmdbd.*(connect|communication)|backup controller in standby",
    re.IGNORECASE,
)


# -- configuration -------------------------------------------------------------------------------


def _text(value: str) -> str:
    if not value:
        raise ValueError("expected a non-empty string, got ''")
    return value


def _absolute_path(value: str) -> str:
    _text(value)
    if not os.path.isabs(value):
        raise ValueError(f"expected an absolute path, got {value!r}")
    return value


# The Slurm configuration the commands (run as the worker) read is the deployment's to say as
# well: a cluster row may name only a file inside this folder (default /etc/slurm).
CONF_DIR_ENV = "GPUOBS_SLURM_CONF_DIR"
DEFAULT_CONF_DIR = "/etc/slurm"


def deploy_conf_dir() -> str:
    return os.path.realpath(os.environ.get(CONF_DIR_ENV, "").strip() or DEFAULT_CONF_DIR)


def _slurm_conf(value: str) -> str:
    _absolute_path(value)
    folder = deploy_conf_dir()
    if os.path.commonpath([folder, os.path.realpath(value)]) != folder:
        raise ValueError(f"must be a file in {folder} ({CONF_DIR_ENV}), got {value!r}")
    return value


def _at_least(minimum: float, words: str):
    def check(value: float) -> float:
        if value < minimum:
            raise ValueError(f"expected {words}, got {value!r}")
        return value

    return check


def _positive_seconds(value: float) -> float:
    if value <= 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return float(value)


def _url(value: str) -> str:
    if not value.startswith(("http://", "https://")) or "@" in value.split("/")[2]:
        raise ValueError("expected an http(s) URL without user or password")
    return value.rstrip("/")


def _partitions(value: list[Any]) -> tuple[str, ...]:
    if not all(isinstance(p, str) and SAFE_NAME.match(p) for p in value):
        raise ValueError(f"expected a list of partition names, got {value!r}")
    return tuple(value)


def _gpu_models(value: dict[str, Any]) -> dict[str, str]:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"expected an object of GRES type -> GPU model name, got {value!r}")
    return dict(value)


# A cluster's ``scheduler_config`` for Slurm (see the module doc).
CONFIG = ConfigSpec(
    (
        Setting("slurm_conf", str, None, "SLURM_CONF for every command", check=_slurm_conf),
        Setting("timeout_s", float, DEFAULT_TIMEOUT_S, "per command", check=_positive_seconds),
        Setting("accounting", bool, False, "read sshare/sacctmgr; allow queue-weight changes"),
        Setting(
            "partitions", list, (), "only these pools (default: every partition)", check=_partitions
        ),
        Setting("gpu_models", dict, {}, "GRES type -> GPU model name", check=_gpu_models),
        Setting("gres_name", str, "gpu", "the GRES that counts GPUs", check=_text),
        Setting(
            "array_expand_limit",
            int,
            1000,
            "pending array tasks expanded per array",
            check=_at_least(1, "an integer >= 1"),
        ),
        Setting(
            "event_overlap_s",
            int,
            300,
            "how far back each read looks again for events",
            check=_at_least(0, "an integer >= 0"),
        ),
        Setting(
            "transport",
            str,
            "cli",
            "how to read: the Slurm commands, or slurmrestd with a JWT",
            choices=("cli", "slurmrestd"),
        ),
        Setting("rest_url", str, None, "slurmrestd's address (transport slurmrestd)", check=_url),
        Setting(
            "rest_token_env",
            str,
            None,
            "environment variable (GPUOBS_SECRET_*) holding slurmrestd's JWT",
            secret=True,
        ),
        Setting("rest_user", str, None, "X-SLURM-USER-NAME sent with the token", check=_text),
        Setting("rest_version", str, "v0.0.42", "slurmrestd's data parser", choices=restd.VERSIONS),
        Setting(
            "read_topology",
            bool,
            True,
            "read GPU topology from gres.conf and topology.yaml/.conf beside slurm.conf",
        ),
        Setting(
            "nvlink_blocks",
            bool,
            False,
            "the block topology's base blocks are NVLink domains (NVL72 racks)",
        ),
    ),
    what="scheduler_config",
)


@dataclass(frozen=True)
class SlurmSettings:
    """A cluster's ``scheduler_config`` for Slurm, checked against :data:`CONFIG` (errors name
    the field)."""

    slurm_conf: str | None = None
    bin_dir: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    accounting: bool = False
    event_overlap_s: int = 300
    parse: parse.ParseSettings = field(default_factory=parse.ParseSettings)
    transport: str = "cli"
    rest_url: str | None = None
    rest_token_env: str | None = None
    rest_user: str | None = None
    rest_version: str = "v0.0.42"
    read_topology: bool = True
    nvlink_blocks: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> SlurmSettings:
        values = parse_config(CONFIG, config)
        if values["transport"] == "slurmrestd":
            missing = [k for k in ("rest_url", "rest_token_env") if not values[k]]
            if missing:
                raise SchedulerError(
                    "; ".join(
                        f"scheduler_config.{k}: required with transport slurmrestd" for k in missing
                    ),
                    permanent=True,
                )
            if values["accounting"]:
                raise SchedulerError(
                    "scheduler_config.accounting: not read over slurmrestd yet (use the commands)",
                    permanent=True,
                )
        return cls(
            slurm_conf=values["slurm_conf"],
            bin_dir=deploy_bin_dir(),
            timeout_s=float(values["timeout_s"]),
            accounting=values["accounting"],
            event_overlap_s=values["event_overlap_s"],
            parse=parse.ParseSettings(
                gres_name=values["gres_name"],
                gpu_models=dict(values["gpu_models"]),
                partitions=frozenset(values["partitions"]),
                array_expand_limit=values["array_expand_limit"],
            ),
            transport=values["transport"],
            rest_url=values["rest_url"],
            rest_token_env=values["rest_token_env"],
            rest_user=values["rest_user"],
            rest_version=values["rest_version"],
            read_topology=values["read_topology"],
            nvlink_blocks=values["nvlink_blocks"],
        )


# Where the Slurm commands are is the deployment's to say, never a cluster row's
# (docs/architecture.md#roles-and-security:
# executables come from deploy-time settings): this environment variable, else PATH.
BIN_DIR_ENV = "GPUOBS_SLURM_BIN_DIR"


def deploy_bin_dir() -> str | None:
    value = os.environ.get(BIN_DIR_ENV, "").strip()
    return value if value and os.path.isabs(value) else None


# -- running commands ----------------------------------------------------------------------------


@dataclass
class CommandLog:
    """What one adapter ran: each command and its seconds (for the cycle's source report)."""

    commands: list[dict[str, Any]] = field(default_factory=list)

    def add(self, command: str, seconds: float, ok: bool) -> None:
        self.commands.append({"command": command, "seconds": round(seconds, 4), "ok": ok})


class SlurmCommands:
    """Runs Slurm's commands for one cluster: argument lists, a timeout, SLURM_CONF."""

    def __init__(self, settings: SlurmSettings, log: CommandLog | None = None) -> None:
        self.settings = settings
        self.log = log or CommandLog()

    def argv(self, args: Sequence[str]) -> list[str]:
        program = args[0]
        if self.settings.bin_dir:
            program = str(Path(self.settings.bin_dir) / program)
        return [program, *args[1:]]

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "LC_ALL": "C"}
        if self.settings.slurm_conf:
            env["SLURM_CONF"] = self.settings.slurm_conf
        return env

    def run(self, *args: str) -> str:
        argv = self.argv(args)
        shown = shlex.join(args)
        started = time.perf_counter()
        try:
            done = subprocess.run(
                argv,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.settings.timeout_s,
                check=False,
            )
        except FileNotFoundError:
            self.log.add(shown, time.perf_counter() - started, False)
            raise SchedulerError(
                f"{args[0]} not found ({argv[0]}): install the Slurm client commands "
                f"or set {BIN_DIR_ENV} in the deployment",
                permanent=True,
            ) from None
        except subprocess.TimeoutExpired as exc:
            self.log.add(shown, time.perf_counter() - started, False)
            stderr = _decoded(exc.stderr)
            raise SchedulerError(
                f"{shown} timed out after {self.settings.timeout_s:g} s"
                + (f": {stderr}" if stderr else ""),
                permanent=False,
            ) from None
        self.log.add(shown, time.perf_counter() - started, done.returncode == 0)
        if done.returncode != 0:
            stderr = (done.stderr or done.stdout or "").strip()[-STDERR_LIMIT:]
            raise SchedulerError(
                f"{shown} failed (exit {done.returncode}): {stderr or 'no output'}",
                permanent=not TRANSIENT.search(stderr),
            )
        return done.stdout


def _decoded(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return (value or "").strip()[-STDERR_LIMIT:]


# -- the adapter ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmReads:
    """One cycle's raw reads, parsed."""

    nodes_document: dict[str, Any]
    jobs: parse.ParsedJobs
    partitions: dict[str, dict[str, str]]
    queues: list[dict[str, Any]]
    read_at: int
    topology: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # node -> topology
    blocks: Mapping[str, str] = field(default_factory=dict)  # node -> NVLink block
    gpu_types: Mapping[str, list[str | None]] = field(default_factory=dict)  # gres.conf's


def scheduler_state(reads: SlurmReads, settings: parse.ParseSettings) -> SchedulerState:
    """The snapshot's scheduler part from one cycle's reads. Tenants seen only in jobs (no
    accounting, or an account sshare did not list) become queues of weight 1. A node with
    several GPU types gets a GPU entry per GPU with its own ``gpu_model`` (:func:`gpu_models`);
    the node's ``gpu_model`` is the type most of its GPUs have."""
    nodes = parse.parse_nodes(reads.nodes_document, settings)
    gres = {
        str(r.get("name") or r.get("hostname")): r.get("gres")
        for r in parse.node_records(reads.nodes_document)
    }
    gpus: list[dict[str, Any]] = []
    for node in nodes:
        name = node["name"]
        found = reads.topology.get(name)
        if found and _topology_gpus(found) == node["gpus"]:  # gres.conf agrees with Slurm
            node["topology"] = found
        entries = [{"node": name, "index": i} for i in range(node["gpus"])]
        block = reads.blocks.get(name)
        if block:
            for entry in entries:
                entry["nvlink_clique"] = f"slurm-block:{block}"
        models = gpu_models(gres.get(name), reads.gpu_types.get(name), settings)
        mixed = len(set(models)) > 1 and len(models) == node["gpus"]
        if mixed:
            for entry, model in zip(entries, models, strict=True):
                entry["gpu_model"] = model
        if block or mixed:
            gpus.extend(entries)
    pools = {node["pool"] for node in nodes}
    placement = {
        name: parse.placement_of(values)
        for name, values in reads.partitions.items()
        if name in pools or name in settings.partitions
    }
    scheduler: dict[str, Any] = {"kind": "slurm", "placement": placement}
    if reads.jobs.refused:
        # Records past the parsers' bounds or inconsistent with the nodes read, left out and
        # named (never expanded).
        logger.warning(
            "slurm: %d job record(s) refused: %s", len(reads.jobs.refused), reads.jobs.refused[:3]
        )
    queues = list(reads.queues)
    known = {queue["name"] for queue in queues}
    for job in reads.jobs.jobs:
        if job["queue"] and job["queue"] not in known:
            known.add(job["queue"])
            queues.append({"name": job["queue"], "tenant": job["tenant"], "weight": 1})
    return SchedulerState(
        nodes=nodes,
        queues=queues,
        jobs=reads.jobs.jobs,
        scheduler=scheduler,
        gpus=gpus,
        refused=reads.jobs.refused[:REFUSED_SHOWN],
    )


def gpu_models(
    gres: Any, conf_types: list[str | None] | None, settings: parse.ParseSettings
) -> list[str | None]:
    """Each GPU's model on a node, in index order: the types of its gres.conf lines in Slurm's
    order when they are the node's types (exact, interleaved or not), else its GRES string's
    in the order listed (``gpu:h100:2,gpu:h200:4`` → 2 × h100 then 4 × h200); through
    ``gpu_models`` (GRES type → model name)."""
    listed = parse.gpu_types_listed(gres, settings.gres_name)
    types = listed
    if conf_types is not None and sorted(map(str, conf_types)) == sorted(map(str, listed)):
        types = conf_types
    return [settings.gpu_models.get(t or "", t) for t in types]


def _topology_gpus(topology: Mapping[str, Any]) -> int:
    numa = topology.get("numa")
    if isinstance(numa, list):
        return len(numa)
    return sum(len(group) for group in topology.get("nvlink_domains") or [])


# How Slurm never holds part of a gang (the gang-release advisory).
GANG_ADVICE = GangAdvice(
    "Slurm: submit the gang as one job (`sbatch --nodes=N --gpus-per-node=G` with `srun` for "
    "the ranks, or a heterogeneous job `sbatch ... : ...`), not as separate jobs per rank: "
    "Slurm allocates one job whole, so it never holds part of a gang."
)


class SlurmAdapter:
    id: ClassVar[str] = "slurm"
    capabilities: ClassVar[Capabilities] = Capabilities(
        change_kinds=frozenset(
            {"placement-policy", "drain-node", "resume-node", "queue-weight", "gang-release"}
        ),
        dry_run=True,
        gang_advice=GANG_ADVICE,
    )

    def __init__(
        self,
        config: Mapping[str, Any] | None,
        *,
        cluster: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.settings = SlurmSettings.from_config(config)
        self.log = CommandLog()
        self.commands = SlurmCommands(self.settings, self.log)
        self.rest: restd.SlurmRest | None = None
        if self.settings.transport == "slurmrestd":
            self.rest = restd.SlurmRest(
                self.settings.rest_url or "",
                version=self.settings.rest_version,
                token_env=self.settings.rest_token_env or "",
                user=self.settings.rest_user,
                timeout_s=self.settings.timeout_s,
                log=self.log,
            )
        self.clock = clock
        self._unconsumed: SlurmReads | None = None
        self.topology_problems: list[str] = []

    # -- reading ---------------------------------------------------------------------------

    def _read(self, *, with_queues: bool = True) -> SlurmReads:
        settings = self.settings.parse
        if self.rest is not None:
            nodes_document = self.rest.nodes()
            jobs_document = self.rest.jobs()
        else:
            nodes_document = parse.parse_json(self.commands.run("sinfo", "--json"), "sinfo --json")
            jobs_document = parse.parse_json(self.commands.run("squeue", "--json"), "squeue --json")
        read_at = int(self.clock())
        partitions: dict[str, dict[str, str]] = {}
        queues: list[dict[str, Any]] = []
        topology: dict[str, dict[str, Any]] = {}
        blocks: dict[str, str] = {}
        gpu_types: dict[str, list[str | None]] = {}
        if with_queues:
            if self.rest is not None:
                partitions = self.rest.partitions()
            else:
                partitions = parse.parse_partitions(
                    self.commands.run("scontrol", "show", "partition", "-o")
                )
            if self.settings.accounting:
                queues = self._read_queues()
            if self.settings.read_topology:
                topology, blocks, gpu_types = self._read_topology(nodes_document)
        jobs = parse.parse_jobs(jobs_document, settings)
        node_gpus = {n["name"]: n["gpus"] for n in parse.parse_nodes(nodes_document, settings)}
        parse.refuse_inconsistent(jobs, node_gpus)
        return SlurmReads(
            nodes_document, jobs, partitions, queues, read_at, topology, blocks, gpu_types
        )

    def _read_topology(
        self, nodes_document: Mapping[str, Any]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, list[str | None]]]:
        conf = self.settings.slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        found = slurm_topology.read_beside(
            Path(conf).parent,
            parse.node_records(nodes_document),
            gres_name=self.settings.parse.gres_name,
            nvlink_blocks=self.settings.nvlink_blocks,
        )
        self.topology_problems = found.problems
        return found.topology, found.blocks, found.gpu_types

    def _read_queues(self) -> list[dict[str, Any]]:
        sshare = self.commands.run("sshare", "-P", "-n", "-o", ",".join(parse.SSHARE_FIELDS))
        clusters = {r["Cluster"] for r in parse.parse_parsable(sshare, parse.SSHARE_FIELDS)}
        where = ["where", f"cluster={next(iter(clusters))}"] if len(clusters) == 1 else []
        assoc = self.commands.run(
            "sacctmgr",
            "-P",
            "-n",
            "show",
            "associations",
            *where,
            f"format={','.join(parse.ASSOC_FIELDS)}",
        )
        return parse.parse_queues(sshare, assoc, self.settings.parse.gres_name)

    def read_state(self) -> SchedulerState:
        """Nodes, queues (accounts), jobs and each partition's placement, from one set of reads
        (which a following :meth:`read_events` on this adapter reuses)."""
        reads = self._read()
        self._unconsumed = reads
        state = scheduler_state(reads, self.settings.parse)
        if self.topology_problems:
            state.scheduler["topology_problems"] = self.topology_problems[:100]
        return state

    def read_events(self, cursor: str | None) -> EventBatch:
        """Events since ``cursor`` derived from job and node records (see
        :func:`slurm_parse.derive_events`); reuses the reads of a preceding :meth:`read_state`."""
        reads, self._unconsumed = self._unconsumed, None
        if reads is None:
            reads = self._read(with_queues=False)
        names = {n["name"] for n in parse.parse_nodes(reads.nodes_document, self.settings.parse)}
        nodes = {
            "nodes": [
                record
                for record in parse.node_records(reads.nodes_document)
                if record.get("name") in names
            ]
        }
        events, cursor_after = parse.derive_events(
            reads.jobs,
            nodes,
            parse.EventCursor.parse(cursor),
            now=reads.read_at,
            overlap_s=self.settings.event_overlap_s,
        )
        return EventBatch(events=events, cursor=cursor_after.dump())

    def read_job_usage(self, job_ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """Slurm's accounting of the running jobs' GPU use (``gres/gpuutil``, ``gres/gpumem``):
        one ``sstat`` for all of ``job_ids`` (none: no command). It needs the command line."""
        if self.rest is not None:
            raise SchedulerError(
                "slurm_tres runs sstat: it needs scheduler_config.transport cli", permanent=True
            )
        if not job_ids:
            return {}
        text = self.commands.run(
            "sstat",
            "-a",
            "-n",
            "-P",
            "-j",
            ",".join(job_ids),
            f"--format={','.join(slurm_tres.SSTAT_FIELDS)}",
        )
        return slurm_tres.parse_sstat(text)

    # -- changing --------------------------------------------------------------------------

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        """Make (or, with ``dry_run``, only check and show) one change:

        - ``{"kind": "placement-policy", "target": "pool:P", "to": "binpack" | "spread"}``
          → ``scontrol update PartitionName=P LLN=NO | YES``
        - ``{"kind": "drain-node", "target": "node:N", "reason": "..."}``
          → ``scontrol update NodeName=N State=DRAIN Reason=...``
        - ``{"kind": "resume-node", "target": "node:N"}`` → ``... State=RESUME``
        - ``{"kind": "queue-weight", "target": "queue:A", "to": 4}``
          → ``sacctmgr -i modify account name=A set fairshare=4`` (accounting only)
        - ``{"kind": "gang-release", "target": "job:1234", "to": "requeued"}``
          → ``scontrol requeue 1234`` (Slurm allocates a job whole: its state reads
          ``running``/``pending``..., never ``partial``, so a release guarded by
          ``"from": "partial"`` is refused)

        The target is read first (an unknown one is a permanent error); with ``"from"`` in
        the change, a target whose value is no longer that is refused. A real change reads the
        target again afterwards.
        """
        if self.rest is not None:
            raise SchedulerError(
                "the slurmrestd transport only reads; changes need the Slurm commands "
                "(scheduler_config.transport cli)",
                permanent=True,
            )
        plan = self._plan(change)
        before = plan.read()
        if "from" in change and change["from"] != before:
            raise SchedulerError(
                f"{change['kind']} {change['target']}: the target changed since the "
                f"recommendation (now {before!r}, expected {change['from']!r})",
                conflict=True,
            )
        command = shlex.join(plan.command)
        if dry_run:
            return ChangeResult(
                applied=False,
                dry_run=True,
                before=before,
                after=plan.expected(before),
                command=command,
                message="dry run: nothing was changed",
            )
        self.commands.run(*plan.command)
        after = plan.read()
        return ChangeResult(
            applied=True, dry_run=False, before=before, after=after, command=command
        )

    def _plan(self, change: Mapping[str, Any]) -> _Plan:
        kind = change.get("kind")
        if kind == "placement-policy":
            pool = _target(change)
            to = change.get("to")
            if to not in ("binpack", "spread"):
                raise SchedulerError(
                    f"placement-policy: 'to' must be binpack or spread, got {to!r}", permanent=True
                )
            lln = "YES" if to == "spread" else "NO"
            return _Plan(
                ["scontrol", "update", f"PartitionName={pool}", f"LLN={lln}"],
                lambda: self._partition_placement(pool),
                lambda before: to,
            )
        if kind in ("drain-node", "resume-node"):
            node = _target(change)
            if kind == "drain-node":
                reason = str(change.get("reason") or "drained by gpuobs")
                if not reason.isprintable() or len(reason) > 255:
                    raise SchedulerError(
                        "drain-node: 'reason' must be one printable line of at most 255 characters",
                        permanent=True,
                    )
                command = ["scontrol", "update", f"NodeName={node}", "State=DRAIN"]
                command.append(f"Reason={reason}")

                def expected(before: dict[str, str]) -> dict[str, str]:
                    # Jobs still running keep a draining node cordoned until they end.
                    busy = before["slurm_state"].split("+")[0] in parse.BUSY_STATES
                    return {"state": "cordoned" if busy else "drained", "reason": reason}

            else:
                command = ["scontrol", "update", f"NodeName={node}", "State=RESUME"]

                def expected(before: dict[str, str]) -> dict[str, str]:
                    return {"state": "ready", "reason": ""}

            return _Plan(command, lambda: self._node_state(node), expected)
        if kind == "queue-weight":
            account = _target(change)
            if not self.settings.accounting:
                raise SchedulerError(
                    "queue-weight: needs Slurm accounting (slurmdbd); set "
                    "scheduler_config.accounting to true",
                    permanent=True,
                )
            weight = change.get("to")
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 1:
                raise SchedulerError(
                    f"queue-weight: 'to' must be a number >= 1, got {weight!r}", permanent=True
                )
            shares = round(weight)
            return _Plan(
                [
                    "sacctmgr",
                    "-i",
                    "modify",
                    "account",
                    f"name={account}",
                    "set",
                    f"fairshare={shares}",
                ],
                lambda: self._account_fairshare(account),
                lambda before: shares,
            )
        if kind == "gang-release":
            job = _target(change)
            return _Plan(
                ["scontrol", "requeue", job], lambda: self._job_state(job), lambda before: "pending"
            )
        raise SchedulerError(f"Slurm cannot apply a change of kind {kind!r}", permanent=True)

    def _job_state(self, job: str) -> str:
        """A job's state in lower case (``running``, ``pending``, ``requeued``...)."""
        try:
            text = self.commands.run("scontrol", "show", "job", job, "-o")
        except SchedulerError as exc:
            if "Invalid job id" in str(exc):
                raise SchedulerError(f"no job {job!r}", permanent=True) from exc
            raise
        state = parse.parse_key_values(text).get("JobState", "")
        if not state:
            raise SchedulerError(f"no job {job!r}", permanent=True)
        return state.lower()

    def _partition_placement(self, pool: str) -> str:
        partitions = parse.parse_partitions(
            self.commands.run("scontrol", "show", "partition", pool, "-o")
        )
        if pool not in partitions:
            raise SchedulerError(f"no partition {pool!r}", permanent=True)
        return parse.placement_of(partitions[pool])

    def _node_state(self, node: str) -> dict[str, str]:
        pairs = parse.parse_key_values(self.commands.run("scontrol", "show", "node", node, "-o"))
        if pairs.get("NodeName") != node:
            raise SchedulerError(f"no node {node!r}", permanent=True)
        words = pairs.get("State", "").split("+")
        record = {"state": words[0], "state_flags": words[1:]}
        state = parse.node_state(record)
        reason = pairs.get("Reason", "")
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason)  # drop " [root@2026-11-29T...]"
        return {
            "state": state,
            "slurm_state": pairs.get("State", ""),
            "reason": "" if state == "ready" or reason == "(null)" else reason,
        }

    def _account_fairshare(self, account: str) -> int | None:
        rows = parse.parse_parsable(
            self.commands.run(
                "sacctmgr",
                "-P",
                "-n",
                "show",
                "associations",
                "where",
                f"account={account}",
                "format=Account,User,Partition,Share",
            ),
            ("Account", "User", "Partition", "Share"),
        )
        for row in rows:
            if row["Account"] == account and not row["User"] and not row["Partition"]:
                return int(row["Share"]) if row["Share"].isdigit() else None
        raise SchedulerError(f"no account {account!r}", permanent=True)


@dataclass(frozen=True)
class _Plan:
    command: list[str]
    read: Callable[[], Any]  # the target's current value
    expected: Callable[[Any], Any]  # its value after the change, given the value before


def _target(change: Mapping[str, Any]) -> str:
    """The target's name, safe as one argument of a Slurm command."""
    return target_name(change, pattern=SAFE_NAME, words="letters, digits, '.', '_', '-'")
