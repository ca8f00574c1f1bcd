from django.apps import AppConfig


class PairwiseConfig(AppConfig):
    name = "pairwise"
    verbose_name = "Pairwise judgements (ACUTE-Eval)"
