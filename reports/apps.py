from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"

    def ready(self) -> None:
        from reports import planning  # noqa: F401  (declares its kind of job: every job process must know it)
