"""The machine-facing API under /api/v1/ (DRF): scheduler event ingestion and the Alertmanager
webhook. Token authentication (``Authorization: Token <key>`` or ``Bearer <key>``); see
docs/integrations.md."""
