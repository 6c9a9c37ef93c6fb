from django.apps import AppConfig


class DiagnosisConfig(AppConfig):
    name = "diagnosis"
    verbose_name = "Diagnosis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Build the rule registry at start-up, so that two rule modules claiming one id stop the
        # process here (DuplicateRuleError) instead of at the first diagnosis.
        from diagnosis.core.rules.registry import all_rules  # noqa: PLC0415 -- Django: apps are ready

        all_rules()
