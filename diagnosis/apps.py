from django.apps import AppConfig


class DiagnosisConfig(AppConfig):
    name = "diagnosis"
    verbose_name = "Diagnosis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Build the rule registry at start-up, so that two rule modules claiming one id stop the
        # process here (DuplicateRuleError) instead of at the first diagnosis.
        from diagnosis.rules.registry import all_rules

        all_rules()
