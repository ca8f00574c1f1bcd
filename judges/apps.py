from django.apps import AppConfig


class JudgesConfig(AppConfig):
    name = "judges"
    verbose_name = "Automatic judges"

    def ready(self) -> None:
        from judges import jobs, privacy  # noqa: F401  (jobs declares its kind of job: every job process must know it)

        privacy.connect()  # a deleted worker's judge scores are counted in the deletion's summary (docs/privacy.md)
