from django.apps import AppConfig


class StudiesConfig(AppConfig):
    name = "studies"

    def ready(self) -> None:
        from evalsite import checks  # noqa: F401  (registers the system checks)
