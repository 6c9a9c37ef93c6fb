from django.apps import AppConfig


class DiagnosisConfig(AppConfig):
    name = "diagnosis"
    verbose_name = "Diagnosis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from diagnosis.identity import checks  # noqa: F401, PLC0415 -- registers GPUOBS_ROLE_MAP's check
        from diagnosis.reports import checks as pdf_checks  # noqa: F401, PLC0415 -- the PDF font's


def build_plugin_registries() -> None:
    """Build the rules' and generators' registries (discovered: every rule module, and pandas
    with them), so that two plugins claiming one id stop the process at its start (a
    DuplicatePluginError) instead of at the first diagnosis. The web and worker processes call
    this once Django is set up (gpuobs/wsgi.py, gpuobs/celery.py's worker_init), as do the
    commands that diagnose, at their first ``all_rules()``; the scheduler adapters' and metric
    sources' registries (diagnosis/edge/*/registry.py, declared) are built when the models'
    choices load them. Not in ``ready()``: every command would import the rules (1 s of CPU with
    pandas) before doing anything (issue #35)."""
    from diagnosis.core.recommend.registry import all_generators  # noqa: PLC0415 -- see above
    from diagnosis.core.rules.registry import all_rules  # noqa: PLC0415 -- see above

    all_rules()
    all_generators()
