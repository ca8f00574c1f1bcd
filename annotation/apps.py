from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"

    def ready(self) -> None:
        from annotation import privacy

        privacy.connect()
