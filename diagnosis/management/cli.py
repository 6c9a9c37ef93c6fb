"""What every management command holds to (docs/operations.md, "Command-line conventions").

- Exit codes: 0 done; **2** for bad input or an object that does not exist (an unknown cluster,
  user or token, a file that is no snapshot, an option out of range), the message on stderr
  naming the option; 1 for work that failed on good input (Prometheus did not answer, a
  component is not healthy).
- ``--json`` where a command prints a table or a summary: one JSON object (or one per line for a
  command that goes on, like ``collect --cluster``), nothing else on stdout.
- Long work says where it is on stderr (:class:`Progress`), never with ``--json`` or
  ``--verbosity 0``, so stdout stays what a script reads.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from django.core.management.base import CommandError

from diagnosis.models import Cluster

BAD_INPUT = 2


def bad_input(message: str) -> CommandError:
    """The error of a command given bad input or an unknown object: exit code 2."""
    return CommandError(message, returncode=BAD_INPUT)


def cluster_named(name: str, *, option: str = "--cluster", sim_only: bool = False) -> Cluster:
    """The cluster called ``name`` (``sim_only``: whose scheduler is the simulator), or the
    exit-2 error naming the option and the name."""
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise bad_input(f"{option}: no cluster {name!r}")
    if sim_only and cluster.scheduler_kind != "sim":
        raise bad_input(f"{option}: cluster {name!r} is not a simulated cluster")
    return cluster


class Progress:
    """Steps of long work on stderr, each with the seconds since the work began; silent when
    ``quiet`` (``--json``, ``--verbosity 0``)."""

    def __init__(self, stream: TextIO | Any, *, quiet: bool) -> None:
        self.stream = stream
        self.quiet = quiet
        self.began = time.monotonic()

    @classmethod
    def of(cls, command: Any, options: dict[str, Any], *, json_key: str = "json") -> Progress:
        quiet = bool(options.get(json_key)) or int(options.get("verbosity", 1)) == 0
        return cls(command.stderr, quiet=quiet)

    def step(self, text: str) -> None:
        if self.quiet:
            return
        self.stream.write(f"[{time.monotonic() - self.began:6.1f} s] {text}")
        self.stream.flush()
