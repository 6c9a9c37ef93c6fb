"""A real Slurm on this one machine, for tests: munge, slurmctld, several slurmd with fake GPUs,
and (optionally) slurmdbd on its own MariaDB for accounting.

Everything lives under one temporary folder and listens on free loopback ports, so parallel test
sessions never clash; :meth:`SlurmCluster.stop` ends every process it started (jobs → slurmd →
slurmctld → slurmdbd → MariaDB → munged, SIGKILL after a timeout). What works on this machine
kind, and why each configuration line is there, is recorded in
``../shared/notes/slurm-test-cluster.md``.

Run as root (slurmd starts jobs as their owner). Can also be started by hand::

    .venv/bin/python -m tests.support.slurm_cluster /tmp/slurm-play   # Ctrl-C stops it
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from diagnosis.edge.schedulers.slurm.parse import expand_hostlist, expand_indexes
from tests.support.processes import free_port, stop_group

INSTALL_HINT = "apt-get install slurmctld slurmd slurm-client munge slurmdbd mariadb-server"
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")
ACCOUNTING_BINARIES = ("slurmdbd", "sacctmgr", "sshare", "sacct", "mariadbd", "mariadb-install-db")
CLUSTER_NAME = "gpuobs-test"

T = TypeVar("T")


class SlurmClusterError(RuntimeError):
    """The test cluster did not come up (the message carries the daemon's log tail)."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    partition: str
    gpu_type: str = "h100"
    gpus: int = 8
    cpus: int = 32
    # slurm.conf's Gres= (default gpu:<gpu_type>:<gpus>) and the node's gres.conf lines after
    # ``NodeName=<name> Name=gpu`` ({dev} is the node's device path prefix, .../<name>_nvidia;
    # default one line: Type=<gpu_type> File={dev}[0-<gpus-1>])
    gres: str | None = None
    gres_lines: tuple[str, ...] = ()


DEFAULT_NODES = (
    NodeSpec("n1", "gpu"),
    NodeSpec("n2", "gpu"),
    NodeSpec("s1", "small", gpu_type="a100", gpus=4, cpus=16),
)


def wait_until(
    check: Callable[[], T], *, timeout: float = 30.0, what: str = "condition", every: float = 0.1
) -> T:
    """Poll ``check`` until it returns something truthy; its value, or TimeoutError naming
    ``what``. ``check`` may raise while waiting (a daemon not up yet); the last error is shown."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(every)


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class SlurmCluster:
    base: Path
    nodes: Sequence[NodeSpec] = DEFAULT_NODES
    accounting: bool = False
    daemons: list[Daemon] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)

    # -- paths -------------------------------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.base / "munge" / "munge.sock"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def partitions(self) -> dict[str, list[NodeSpec]]:
        found: dict[str, list[NodeSpec]] = {}
        for node in self.nodes:
            found.setdefault(node.partition, []).append(node)
        return found

    # -- commands ----------------------------------------------------------------------------

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        done = subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}"
            )
        return done.stdout

    def associations(self, where: str, fields: str) -> str:
        """``sacctmgr show associations`` where ``where``: a row a line, ``fields`` |-separated."""
        return self.run(
            "sacctmgr", "-P", "-n", "show", "associations", "where", where, f"format={fields}"
        )

    def unreachable_conf(self, name: str = "unreachable") -> Path:
        """A copy of slurm.conf (``etc/<name>.conf``) naming a controller port nobody serves."""
        path = self.base / "etc" / f"{name}.conf"
        text = self.conf.read_text().replace(
            f"SlurmctldPort={self.ports['slurmctld']}", f"SlurmctldPort={free_port()}"
        )
        path.write_text(text + "MessageTimeout=2\n")
        return path

    def submit(self, *options: str, command: str = "sleep 600") -> str:
        """``sbatch --parsable`` a job that runs ``command``; its id (``123``)."""
        out = self.run(
            "sbatch",
            "--parsable",
            f"--output={self.base / 'jobs' / '%j.out'}",
            *options,
            "--wrap",
            command,
        )
        return out.strip().split(";")[0]

    def jobs(self) -> list[dict[str, Any]]:
        return json.loads(self.run("squeue", "--json"))["jobs"]

    def job(self, job_id: str) -> dict[str, Any] | None:
        """squeue's JSON record of a job id (``123`` or an array task ``123_4``)."""
        for record in self.jobs():
            ids = {str(record.get("job_id"))}
            if record.get("array_task_id") not in (None, ""):
                ids.add(f"{record.get('array_job_id')}_{record.get('array_task_id')}")
            if job_id in ids:
                return record
        return None

    def job_state(self, job_id: str) -> str | None:
        record = self.job(job_id)
        return None if record is None else str(record.get("job_state"))

    def wait_job(self, job_id: str, state: str, *, reason: str | None = None, timeout=30) -> dict:
        def reached() -> dict[str, Any] | None:
            record = self.job(job_id)
            if record is None or record.get("job_state") != state:
                return None
            if reason is not None and record.get("state_reason") != reason:
                return None
            return record

        detail = f" with reason {reason}" if reason else ""
        return wait_until(reached, timeout=timeout, what=f"job {job_id} {state}{detail}")

    def job_gpus(self, job_id: str) -> dict[str, list[int]]:
        """Node -> GPU indexes of a running job, from ``scontrol show job -d`` (a different
        output from the ``squeue --json`` the adapter reads, to check it against)."""
        text = self.run("scontrol", "show", "job", "-d", job_id)
        found: dict[str, list[int]] = {}
        for nodes, indexes in re.findall(r"Nodes=(\S+) .*?GRES=gpu[^(]*\(IDX:([^)]*)\)", text):
            for node in expand_hostlist(nodes):
                found[node] = expand_indexes(indexes)
        return found

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = [str(j) for j in job_ids]
        if ids:
            self.run("scancel", *ids, check=False)

    def node(self, name: str) -> dict[str, Any]:
        for record in json.loads(self.run("sinfo", "--json"))["nodes"]:
            if record.get("name") == name:
                return record
        raise KeyError(name)

    def wait_until_node(self, name: str, state: str, timeout: float = 30) -> dict[str, Any]:
        """Wait until sinfo shows a node in a base state (``idle``, ``mixed`` ...)."""
        return wait_until(
            lambda: (record := self.node(name)).get("state") == state and record,
            timeout=timeout,
            what=f"node {name} {state}",
        )

    def nodes_idle(self) -> bool:
        """Every node responding and free of jobs and drains (the state tests start from)."""
        records = json.loads(self.run("sinfo", "--json"))["nodes"]
        return len(records) == len(self.nodes) and all(
            r.get("state") == "idle" and not r.get("state_flags") for r in records
        )

    def reset(self, timeout: float = 30) -> None:
        """Cancel every job, resume every drained node, set every partition back to LLN=NO;
        wait until the cluster is idle."""
        self.run("scancel", "--full", "--user=root", check=False)
        for partition in self.partitions:
            self.run("scontrol", "update", f"PartitionName={partition}", "LLN=NO")
        for node in self.nodes:
            record = self.node(node.name)
            if {"DRAIN", "DRAINED", "DRAINING"} & set(record.get("state_flags") or []):
                self.run("scontrol", "update", f"NodeName={node.name}", "State=RESUME")
        wait_until(self.nodes_idle, timeout=timeout, what="every node idle")

    # -- life cycle --------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> SlurmCluster:
        for folder in ("etc", "munge", "dev", "state", "spool", "log", "run", "jobs", "db"):
            (self.base / folder).mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)
        (self.base / "munge").chmod(0o755)
        for name in ("slurmctld", "slurmdbd", "mariadb", *(n.name for n in self.nodes)):
            self.ports[name] = free_port()
        try:
            self._start_munge(timeout)
            self._make_gpu_devices()
            if self.accounting:
                self._start_mariadb(timeout)
                self._start_slurmdbd(timeout)
            self._write_config()
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)], "slurmctld.log")
            wait_until(
                lambda: self.run("scontrol", "ping", timeout=5).count("UP"),
                timeout=timeout,
                what="slurmctld to answer",
            )
            if self.accounting:
                self._add_associations()
            for node in self.nodes:
                self._spawn(
                    f"slurmd-{node.name}",
                    ["slurmd", "-D", "-N", node.name, "-f", str(self.conf)],
                    f"slurmd-{node.name}.log",
                )
            wait_until(self.nodes_idle, timeout=timeout, what="every node idle")
        except Exception as exc:
            logs = "\n".join(f"--- {d.name}\n{d.tail()}" for d in self.daemons)
            self.stop()
            raise SlurmClusterError(f"{exc}\n{logs}") from exc
        return self

    def stop(self, timeout: float = 10) -> None:
        """Cancel jobs, then stop the daemons newest first (slurmd before slurmctld ...)."""
        if any(d.name == "slurmctld" and d.process.poll() is None for d in self.daemons):
            with contextlib.suppress(Exception):
                self.run("scancel", "--full", "--user=root", check=False, timeout=5)
        for daemon in reversed(self.daemons):
            stop_group(daemon.process, timeout)
        self.daemons.clear()

    def _spawn(self, name: str, args: list[str], log_name: str, **kwargs: Any) -> Daemon:
        log = self.base / "log" / log_name
        with open(self.base / "log" / f"{name}.stdout", "ab") as out:
            process = subprocess.Popen(
                args,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
                **kwargs,
            )
        daemon = Daemon(name, process, log)
        self.daemons.append(daemon)
        return daemon

    def _start_munge(self, timeout: float) -> None:
        folder = self.base / "munge"
        key = folder / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=30)
        key.chmod(0o600)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={folder / 'munged.pid'}",
                f"--log-file={self.base / 'log' / 'munged.log'}",
                f"--seed-file={folder / 'munged.seed'}",
            ],
            "munged.log",
        )
        wait_until(self.munge_socket.exists, timeout=timeout, what="munged's socket")

    def _make_gpu_devices(self) -> None:
        # Fake GPUs must be character devices (regular files leave CUDA_VISIBLE_DEVICES empty).
        for node in self.nodes:
            for index in range(node.gpus):
                path = self.base / "dev" / f"{node.name}_nvidia{index}"
                if not path.exists():
                    os.mknod(path, 0o666 | 0o020000, os.makedev(195, index))

    # -- accounting: MariaDB and slurmdbd ----------------------------------------------------

    def _start_mariadb(self, timeout: float) -> None:
        datadir = self.base / "db" / "data"
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        socket_path = self.base / "db" / "mariadb.sock"
        self._spawn(
            "mariadb",
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={datadir}",
                f"--socket={socket_path}",
                f"--port={self.ports['mariadb']}",
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=8M",
                f"--log-error={self.base / 'log' / 'mariadb.log'}",
                f"--pid-file={self.base / 'db' / 'mariadb.pid'}",
            ],
            "mariadb.log",
        )
        self.db_password = secrets.token_hex(12)
        statements = (
            f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self.db_password}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )

        def create_user() -> bool:
            subprocess.run(
                ["mariadb", "--no-defaults", f"--socket={socket_path}", "-uroot", "-e", statements],
                check=True,
                capture_output=True,
                timeout=10,
            )
            return True

        wait_until(create_user, timeout=timeout, what="MariaDB to take the slurm user", every=0.2)

    def _start_slurmdbd(self, timeout: float) -> None:
        conf = self.base / "etc" / "slurmdbd.conf"
        conf.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={self.ports['slurmdbd']}",
                    "SlurmUser=root",
                    f"LogFile={self.base / 'log' / 'slurmdbd.log'}",
                    f"PidFile={self.base / 'run' / 'slurmdbd.pid'}",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",  # TCP: "localhost" would try the default socket
                    f"StoragePort={self.ports['mariadb']}",
                    "StorageUser=slurm",
                    f"StoragePass={self.db_password}",
                    "StorageLoc=slurm_acct_db",
                    "",
                ]
            )
        )
        conf.chmod(0o600)
        self._spawn("slurmdbd", ["slurmdbd", "-D", "-s"], "slurmdbd.log", cwd=self.base)
        # slurmdbd reads SLURM_CONF's folder for slurmdbd.conf.
        wait_until(
            lambda: _port_open(self.ports["slurmdbd"]), timeout=timeout, what="slurmdbd to listen"
        )

    def _add_associations(self) -> None:
        sacctmgr = ("sacctmgr", "-i")
        self.run(*sacctmgr, "add", "cluster", CLUSTER_NAME, check=False)
        for account, share in (("team-a", 4), ("team-b", 1)):
            self.run(*sacctmgr, "add", "account", account, f"fairshare={share}")
        self.run(*sacctmgr, "add", "user", "root", "account=team-a,team-b", "defaultaccount=team-a")
        self.run(*sacctmgr, "modify", "account", "team-b", "set", "GrpTRES=gres/gpu=4")
        self.run(*sacctmgr, "add", "qos", "gpu2", "set", "MaxTRESPerUser=gres/gpu=2")
        self.run(*sacctmgr, "modify", "user", "root", "set", "qos+=gpu2")

    # -- configuration -----------------------------------------------------------------------

    def _write_config(self) -> None:
        base = self.base
        accounting = (
            [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={self.ports['slurmdbd']}",
                # Essential: without it the slurmdbd connection ignores AuthInfo's socket.
                f"AccountingStoragePass={self.munge_socket}",
                "AccountingStorageTRES=gres/gpu",
                "AccountingStorageEnforce=associations,limits",
                "PriorityType=priority/multifactor",
                "PriorityWeightFairshare=10000",
                "PriorityWeightAge=0",
            ]
            if self.accounting
            else ["AccountingStorageType=accounting_storage/none"]
        )
        lines = [
            f"ClusterName={CLUSTER_NAME}",
            "SlurmctldHost=localhost",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={self.ports['slurmctld']}",
            f"SlurmdPort={self.ports[self.nodes[0].name]}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={base / 'state'}",
            f"SlurmdSpoolDir={base / 'spool' / '%n'}",
            f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={base / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={base / 'log' / 'slurmd-%n.log'}",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",  # nodes may claim more CPUs than the host has
            "GresTypes=gpu",
            "JobAcctGatherType=jobacct_gather/none",
            "ReturnToService=2",
            "MailProg=/bin/true",
            "KillWait=2",
            # Schedule (and give pending jobs their reasons) within a second or two.
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "MinJobAge=600",
            *accounting,
        ]
        for node in self.nodes:
            lines.append(
                f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.ports[node.name]} CPUs={node.cpus} RealMemory=64000 "
                f"Gres={node.gres or f'gpu:{node.gpu_type}:{node.gpus}'} State=UNKNOWN"
            )
        for number, (partition, members) in enumerate(self.partitions.items()):
            names = ",".join(n.name for n in members)
            default = "YES" if number == 0 else "NO"
            lines.append(
                f"PartitionName={partition} Nodes={names} Default={default} "
                "MaxTime=INFINITE State=UP"
            )
        self.conf.write_text("\n".join(lines) + "\n")
        gres = [
            f"NodeName={node.name} Name=gpu "
            + line.format(dev=f"{base / 'dev' / node.name}_nvidia")
            for node in self.nodes
            for line in node.gres_lines
            or (f"Type={node.gpu_type} File={{dev}}[0-{node.gpus - 1}]",)
        ]
        (base / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")


def missing_binaries(accounting: bool) -> list[str]:
    wanted = BINARIES + (ACCOUNTING_BINARIES if accounting else ())
    return [name for name in wanted if shutil.which(name) is None]


def _die_with_parent() -> None:
    """In the child before exec: be killed if the test process dies without stopping us."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def record_outputs(cluster: SlurmCluster, out: Path) -> list[str]:
    """Put the cluster in a known mix of states and save what Slurm prints, as the parsers'
    unit-test fixtures (``tests/fixtures/slurm``). Needs a fresh cluster with accounting."""
    out.mkdir(parents=True, exist_ok=True)
    saved: list[str] = []

    def keep(name: str, text: str) -> None:
        (out / name).write_text(text)
        saved.append(name)

    def save(name: str, *args: str) -> None:
        keep(name, cluster.run(*args))

    single = cluster.submit("-J", "single", "-A", "team-a", "--gres=gpu:2")
    multi = cluster.submit("-J", "multi", "-A", "team-a", "-N", "2", "--gres=gpu:3")
    array = cluster.submit(
        "-J", "arr", "-A", "team-a", "-p", "small", "--array=0-5", "--gres=gpu:1"
    )
    cluster.submit("-J", "capped", "-A", "team-b", "--gres=gpu:5")
    cluster.submit("-J", "dep", "-A", "team-a", f"--dependency=afterok:{single}", "--gres=gpu:1")
    cluster.submit("-J", "big", "-A", "team-a", "-N", "2", "--gres=gpu:8")
    done = cluster.submit("-J", "ok", "-A", "team-a", command="true")
    failed = cluster.submit("-J", "bad", "-A", "team-a", command="exit 3")
    cancelled = cluster.submit("-J", "gone", "-A", "team-a", "-N", "2", "--gres=gpu:8")
    cluster.cancel([cancelled])
    for job, state in ((single, "RUNNING"), (multi, "RUNNING"), (done, "COMPLETED")):
        cluster.wait_job(job, state)
    cluster.wait_job(failed, "FAILED")
    cluster.wait_job(f"{array}_3", "RUNNING")
    cluster.run("scontrol", "update", "NodeName=s1", "State=DRAIN", "Reason=gpuobs: Xid 79")
    pinned = cluster.submit(
        "-J", "pinned", "-A", "team-a", "-p", "small", "-w", "s1", "--gres=gpu:1"
    )
    cluster.run("scontrol", "update", "PartitionName=small", "LLN=YES")
    wait_until(
        lambda: all(
            j.get("state_reason") not in (None, "None")
            for j in cluster.jobs()
            if j.get("job_state") == "PENDING"
        ),
        what="every pending job to have a reason",
    )
    save("squeue.json", "squeue", "--json")
    save("sinfo_draining.json", "sinfo", "--json")
    save("scontrol_show_partition.txt", "scontrol", "show", "partition", "-o")
    save("scontrol_show_node_draining.txt", "scontrol", "show", "node", "s1", "-o")
    save("scontrol_show_job_multi.txt", "scontrol", "show", "job", "-d", multi)
    save(
        "sshare.txt",
        "sshare",
        "-P",
        "-n",
        "-o",
        "Cluster,Account,User,RawShares,NormShares,RawUsage,FairShare",
    )
    keep(
        "sacctmgr_associations.txt",
        cluster.associations(
            f"cluster={CLUSTER_NAME}", "Cluster,Account,User,Partition,GrpTRES,MaxTRES"
        ),
    )
    cluster.cancel([array, pinned])
    wait_until(lambda: cluster.node("s1").get("state") == "idle", what="s1 idle")
    save("sinfo_drained.json", "sinfo", "--json")
    save("scontrol_show_node_drained.txt", "scontrol", "show", "node", "s1", "-o")
    unreachable = cluster.unreachable_conf()
    for name, command in (
        ("sinfo_unreachable.json", "sinfo"),
        ("squeue_unreachable.json", "squeue"),
    ):
        done_run = subprocess.run(
            [command, "--json"],
            env={**cluster.env, "SLURM_CONF": str(unreachable)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        keep(name, done_run.stdout)
    return saved


if __name__ == "__main__":  # pragma: no cover - a by-hand helper
    import sys

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/slurm-play")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly on SIGTERM too
    started = time.monotonic()
    record = "--record" in sys.argv
    cluster = SlurmCluster(folder, accounting=record or "--accounting" in sys.argv).start()
    print(f"up in {time.monotonic() - started:.1f} s; export SLURM_CONF={cluster.conf}")
    try:
        if record:
            out = Path(sys.argv[sys.argv.index("--record") + 1])
            print("recorded:", ", ".join(record_outputs(cluster, out)))
        else:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
