"""What a diagnosis cycle records: the cycle, findings, snapshots, tenancy and rollups, scheduler
events, topology uploads and the clusters gpuobs sets up itself."""
