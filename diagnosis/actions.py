"""Named actions: the only code that writes diagnosis models (STYLE.md habit 2).

An action owns its transaction and its side effects. A task it starts after a write is sent with
``task.delay_on_commit(...)``, so no worker ever sees a row that was rolled back. Tasks and views
stay thin and call these.
"""

from django.utils import timezone

from diagnosis.models import Cluster


def run_cluster_cycle(cluster: Cluster) -> None:
    """Run one diagnosis cycle of a cluster (DESIGN.md section 3).

    The caller (``diagnosis.tasks.run_cycle``) holds the cluster's cycle lock. For now this only
    records that a cycle ran; collect, diagnose, account, recommend and notify come here.
    """
    cluster.last_cycle_at = timezone.now()
    cluster.save(update_fields=["last_cycle_at"])
