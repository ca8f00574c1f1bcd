from django.apps import AppConfig


class JudgesConfig(AppConfig):
    name = "judges"
    verbose_name = "Automatic judges"

    def ready(self) -> None:
        from judges import jobs  # noqa: F401  (declares its kind of job: every job process must know it)
        from judges.probes import StudyProbeJudging
        from reports import probejudging

        probejudging.register(StudyProbeJudging())  # reports sits below judges: the verdicts come through here
