"""slurmrestd as the Slurm adapter's transport (``"transport": "slurmrestd"``): the same reads
as the commands, over Slurm's REST API with a JWT, parsed by the same parsers.

- nodes: ``GET /slurm/<v>/nodes`` for ``sinfo --json`` (``{"nodes": [...]}``, read by
  :func:`parse.node_records`);
- jobs: ``GET /slurm/<v>/jobs`` for ``squeue --json`` (the same ``job_info`` records);
- partitions: ``GET /slurm/<v>/partitions`` for ``scontrol show partition -o``: ``LLN`` in
  ``select_type`` is ``spread``; a partition's ``LLN=YES`` flag is not in the API, so a
  partition without it has no placement (unknown, never ``binpack`` by default).

The token is read from the environment variable the config names (``rest_token_env``, a
``GPUOBS_SECRET_*`` reference) each cycle and sent as ``X-SLURM-USER-TOKEN`` (with
``X-SLURM-USER-NAME`` when ``rest_user`` is set); it is never logged or shown. Accounting
reads and writes stay with the commands: this transport reads only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import requests

from diagnosis.edge import secrets
from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.schedulers import rest
from diagnosis.edge.schedulers.slurm.parse import values

VERSIONS = ("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")


class SlurmRest:
    """GETs against one slurmrestd, logging each like a command (path and seconds)."""

    def __init__(
        self,
        url: str,
        *,
        version: str,
        token_env: str,
        user: str | None,
        timeout_s: float,
        log: Any,
    ) -> None:
        self.url = url.rstrip("/")
        self.version = version
        self.token_env = token_env
        self.user = user
        self.timeout_s = timeout_s
        self.log = log
        self.session = requests.Session()

    def headers(self) -> dict[str, str]:
        try:
            token = secrets.read_env(self.token_env, secrets.Use("slurm", self.url))
        except secrets.SecretError as exc:
            raise SchedulerError(f"slurmrestd token: {exc}", permanent=True) from None
        headers = {"X-SLURM-USER-TOKEN": token, "Accept": "application/json"}
        if self.user:
            headers["X-SLURM-USER-NAME"] = self.user
        return headers

    def get(self, what: str) -> dict[str, Any]:
        path = f"/slurm/{self.version}/{what}"
        started = time.perf_counter()
        ok = False
        try:
            document = rest.get_json(
                self.session,
                self.url + path,
                what=f"slurmrestd ({path})",
                timeout_s=self.timeout_s,
                headers=self.headers(),
            )
            values.check_errors(document, f"slurmrestd {path}")
            ok = True
            return document
        finally:
            self.log.add(f"GET {path}", time.perf_counter() - started, ok)

    def nodes(self) -> dict[str, Any]:
        return self.get("nodes")

    def jobs(self) -> dict[str, Any]:
        return self.get("jobs")

    def partitions(self) -> dict[str, dict[str, str]]:
        return placement_settings(self.get("partitions"))


def placement_settings(document: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Partitions whose placement the REST answer shows: ``LLN`` in ``select_type``."""
    found: dict[str, dict[str, str]] = {}
    for record in document.get("partitions") or []:
        if not isinstance(record, Mapping) or not isinstance(record.get("name"), str):
            continue
        select = record.get("select_type")
        if isinstance(select, list) and "LLN" in select:
            found[record["name"]] = {"PartitionName": record["name"], "LLN": "YES"}
    return found
