from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"

    def ready(self) -> None:
        # The chat's kinds of job (runtime/kinds.py) are declared where their workflows live: imported here,
        # so every process that runs jobs (web, Celery worker, a process lane) knows them.
        from chat import armjobs, cooldowns, memory_updates, pii, probing, replies  # noqa: F401
        from memory.llm import mark_reply_thread
        from runtime import executor

        # Reply threads go first at the in-process model (memory.llm: one llama.cpp call at a time).
        executor.on_thread_start("reply", mark_reply_thread)
        # An endpoint's Retry-After holds every process off it (Redis when the site has one).
        cooldowns.install()
        # A full study first frees the places of workers who left (not only when beat's sweep runs).
        from chat import timing
        from studies.models import quota_reached

        quota_reached.connect(timing.free_places, dispatch_uid="chat.timing.free_places")
