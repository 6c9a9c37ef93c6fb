"""The YARN scheduler adapter: reads the ResourceManager's REST API (nodes, applications,
Capacity or Fair Scheduler queues, the ``yarn.io/gpu`` resource) and advises; it writes
nothing (docs/integrations.md, YARN)."""
