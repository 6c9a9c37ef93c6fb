from django.apps import AppConfig


class DiagnosisConfig(AppConfig):
    name = "diagnosis"
    verbose_name = "Diagnosis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The four plugin registries are built at start-up, so that two plugins claiming one id
        # stop the process here (a DuplicatePluginError) instead of at the first diagnosis: the
        # scheduler adapters' and metric sources' (diagnosis/edge/*/registry.py) when the models'
        # choices load them, the rules' and generators' (discovered) here.
        from diagnosis.core.recommend.registry import all_generators  # noqa: PLC0415 -- Django: apps are ready
        from diagnosis.core.rules.registry import all_rules  # noqa: PLC0415 -- Django: apps are ready

        all_rules()
        all_generators()
        from diagnosis.identity import checks  # noqa: F401, PLC0415 -- registers GPUOBS_ROLE_MAP's check
        from diagnosis.reports import checks as pdf_checks  # noqa: F401, PLC0415 -- the PDF font's
