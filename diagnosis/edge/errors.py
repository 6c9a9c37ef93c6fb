"""The one error type of the integrations (healthchecks' ``TransportError``).

Every adapter and source raises an :class:`IntegrationError` (or a subclass naming its side):

- ``permanent``: retrying the same call cannot help (bad config, a change the scheduler
  rejects, a missing permission); otherwise it may (timeout, connection refused, 5xx);
- ``conflict``: the scheduler refused a write because the target changed under it (Kubernetes'
  409 on a stale ``resourceVersion``, an adapter's own ``from`` guard). The workflow sends such
  a change back to "proposed" instead of failing it; it never matches on message text.
"""

from __future__ import annotations


class IntegrationError(RuntimeError):
    """An integration could not deliver, or refused."""

    def __init__(self, message: str, *, permanent: bool = False, conflict: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent or conflict
        self.conflict = conflict


class SchedulerError(IntegrationError):
    """A scheduler could not be read or refused a change."""


class CollectError(IntegrationError):
    """A data source could not deliver a cluster's metrics or state."""


# Which integration a cluster's settings are of (:attr:`ConfigError.side`).
SCHEDULER, SOURCE = "scheduler", "source"
SIDES = {"scheduler_config": SCHEDULER, "metrics_config": SOURCE}


class ConfigError(IntegrationError):
    """A cluster's integration settings are wrong; ``problems`` names every bad key, ``side``
    which integration's settings they are (:data:`SCHEDULER`, :data:`SOURCE`, None: unsaid)."""

    def __init__(
        self, problems: list[str] | str, *, what: str = "config", side: str | None = None
    ) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.side = side
        super().__init__(f"{what}: " + "; ".join(self.problems), permanent=True)
