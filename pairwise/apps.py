from django.apps import AppConfig


class PairwiseConfig(AppConfig):
    name = "pairwise"
    verbose_name = "Pairwise judgements (ACUTE-Eval)"

    def ready(self) -> None:
        from pairwise import privacy

        privacy.connect()
