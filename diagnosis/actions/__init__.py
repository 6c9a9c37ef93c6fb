"""Named actions: the only code that writes diagnosis models (docs/architecture.md, "Layers").

One module per topic (zulip's ``zerver/actions``), in rooms along the cycle:

- ``records/``: what a cycle records: the cycle itself (collect, diagnose, account, recommend),
  findings, snapshots, tenancy and rollups, scheduler events, topology uploads, clusters.
- ``workflow/``: a recommendation's life: proposals, people's review steps, apply, impact
  estimates, verification and rollback, the simulator's direct writes.
- ``oncall/``: incidents: from the ``xid`` rule and from Alertmanager, the jobs a fault hit, the
  drain.
- ``notify/``: what leaves gpuobs: Alertmanager, job owners' notices, report subscriptions.
- ``upkeep/``: gpuobs's own health (clock, heartbeats) and retention.

Each module owns its writes, its transactions and its side effects. Work an action starts after
a write is sent by task name through :mod:`diagnosis.actions.enqueue` once the transaction
commits, so no worker ever sees a row that was rolled back. Tasks and views stay thin and call
these.
"""
