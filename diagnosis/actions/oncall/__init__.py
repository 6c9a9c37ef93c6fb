"""On-call's incidents (docs/ui.md "Incidents"): from the ``xid`` rule each cycle (``incidents``)
and from Alertmanager (``alerts``), the jobs a fault hit (``windows``) and the drain (``drain``)."""
