from django.urls import path

from annotation import views

app_name = "annotation"
urlpatterns = [
    path("", views.home, name="home"),
    path("q/<int:pk>/", views.work, name="work"),
    path("a/<int:pk>/submit/", views.submit, name="submit"),
    path("a/<int:pk>/draft/", views.draft, name="draft"),
    path("a/<int:pk>/skip/", views.skip, name="skip"),
    path("queues/", views.queues, name="queues"),
    path("queues/new/", views.queue_create, name="queue_create"),
    path("queues/<int:pk>/", views.queue_detail, name="queue_detail"),
    path("queues/<int:pk>/report.json", views.queue_report_json, name="queue_report_json"),
    path("queues/<int:pk>/import/", views.queue_import, name="queue_import"),
    path("queues/<int:pk>/toggle/", views.queue_toggle, name="queue_toggle"),
    path("queues/<int:pk>/pull/", views.queue_pull, name="queue_pull"),
    path("queues/<int:pk>/adjudication/", views.adjudication, name="adjudication"),
    path("items/<int:pk>/adjudicate/", views.adjudicate, name="adjudicate"),
    path("queues/<int:pk>/export/gold.jsonl", views.export_gold, name="export_gold"),
    path("queues/<int:pk>/export/summaries.jsonl", views.export_summaries, name="export_summaries"),
]
