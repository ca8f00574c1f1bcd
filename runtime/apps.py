from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    verbose_name = "job runtime"

    def ready(self) -> None:
        from django.core.signals import request_started

        from runtime import executor, jobs, sweeper  # noqa: F401  (jobs registers itself as the runner)

        executor.on_lanes_start(sweeper.THREAD.ensure)
        request_started.connect(sweeper.start_with_web_process, dispatch_uid="runtime.sweeper.web")
