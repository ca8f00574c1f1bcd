from django.apps import AppConfig


class JudgesConfig(AppConfig):
    name = "judges"
    verbose_name = "Automatic judges"

    def ready(self) -> None:
        from judges import jobs  # noqa: F401  (declares its kind of job: every job process must know it)
