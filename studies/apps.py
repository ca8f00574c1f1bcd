from django.apps import AppConfig


class StudiesConfig(AppConfig):
    name = "studies"

    def ready(self) -> None:
        from evalsite import checks, dbpool  # noqa: F401  (checks: registers the system checks)

        dbpool.install()  # a forked child builds its own database pool (evalsite/dbpool.py)
