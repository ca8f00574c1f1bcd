from django.apps import AppConfig


class ProlificConfig(AppConfig):
    name = "prolific"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from prolific import entry, privacy

        privacy.connect()  # a deleted worker's submissions go with them (docs/privacy.md)
        entry.connect()  # a worker's link to a later wave continues their participation
