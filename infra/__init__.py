"""What the site runs on, below the apps: the database backends and pool, and the system checks of the
configuration. Django-aware, but it knows nothing of studies, chats or the project's settings module;
the apps and the project (``evalsite``) build on it (docs/architecture.md, "Who imports whom")."""
