"""Reports built from the stored rollups and records (never from raw metrics): the tenant
fairness report (DESIGN.md section 7) as data, JSON, CSV and PDF. docs/fairness.md."""
