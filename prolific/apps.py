from django.apps import AppConfig


class ProlificConfig(AppConfig):
    name = "prolific"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from prolific import privacy

        privacy.connect()  # a deleted worker's submissions go with them (docs/privacy.md)
