from django.apps import AppConfig


class JudgesConfig(AppConfig):
    name = "judges"
    verbose_name = "Automatic judges"

    def ready(self) -> None:
        from chat.signals import session_ended
        from judges import blinding, jobs, privacy  # noqa: F401  (blinding, jobs: their kinds of job)
        from judges.probes import StudyProbeJudging
        from reports import probejudging

        probejudging.register(StudyProbeJudging())  # reports sits below judges: the verdicts come through here
        # every session's bot turns are scanned for blinding breaches once its chat is over (chat sits below judges)
        session_ended.connect(blinding.submit_scan, dispatch_uid="judges.blinding.submit_scan")
        privacy.connect()  # a deleted worker's judge scores are counted in the deletion's summary (docs/privacy.md)
