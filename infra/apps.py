from django.apps import AppConfig

from infra import checks, dbpool  # noqa: F401  (checks: importing it registers the system checks)


class InfraConfig(AppConfig):
    name = "infra"
    verbose_name = "site infrastructure"

    def ready(self) -> None:
        dbpool.install()  # a forked child builds its own database pool (infra/dbpool.py)
