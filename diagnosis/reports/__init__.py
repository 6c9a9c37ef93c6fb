"""Reports built from the stored rollups and records (never from raw metrics): the tenant
fairness report as data, JSON, CSV and PDF (docs/fairness.md)."""
