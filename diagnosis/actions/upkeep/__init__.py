"""gpuobs's own upkeep: one clock, heartbeats and health checks (``health``), and retention."""
