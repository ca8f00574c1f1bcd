"""The job runtime: how background work runs, below the apps (docs/architecture.md, "How work runs").

One model (:class:`runtime.models.Job`), kinds declared once with their lane and retry policy
(:mod:`runtime.kinds`), one way to submit (:func:`runtime.jobs.submit`), one way to run an attempt
(:func:`runtime.jobs.run`) whatever executes it (:mod:`runtime.executor`: Celery, threads and a
low-priority process in the embedded default, inline), one sweeper for lost work
(:mod:`runtime.sweeper`), and one way to push to a worker's page (:mod:`runtime.push`).
"""
