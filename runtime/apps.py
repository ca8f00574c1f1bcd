from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    verbose_name = "job runtime"

    def ready(self) -> None:
        from runtime import executor, jobs, sweeper  # noqa: F401  (jobs registers itself as the runner)

        executor.on_lanes_start(sweeper.THREAD.ensure)
