from django.urls import path

from reports import pairwise_views, plan_views, privacy_views, quality_views, views

app_name = "reports"
urlpatterns = [
    path("studies/<slug:slug>/analysis/", views.analysis, name="study_analysis"),
    path("studies/<slug:slug>/analysis/export/<str:fmt>/", views.export_file, name="study_export"),
    path("studies/<slug:slug>/analysis/plots/<str:name>.svg", views.plot, name="study_plot"),
    path("studies/<slug:slug>/analysis/import/", views.import_ratings, name="import_ratings"),
    path("studies/<slug:slug>/analysis/imports/<int:pk>/", views.analysis, name="dataset_analysis"),
    path("studies/<slug:slug>/analysis/imports/<int:pk>/export/<str:fmt>/", views.export_file, name="dataset_export"),
    path("studies/<slug:slug>/analysis/imports/<int:pk>/plots/<str:name>.svg", views.plot, name="dataset_plot"),
    path("studies/<slug:slug>/analysis/imports/<int:pk>/delete/", views.delete_dataset, name="dataset_delete"),
    path("studies/<slug:slug>/analysis/pairwise/", pairwise_views.leaderboard, name="study_pairwise"),
    path("studies/<slug:slug>/analysis/pairwise/leaderboard.svg", pairwise_views.plot, name="study_pairwise_plot"),
    path(
        "studies/<slug:slug>/analysis/pairwise/export/<str:fmt>/", pairwise_views.export, name="study_pairwise_export"
    ),
    path("studies/<slug:slug>/quality/", quality_views.quality, name="study_quality"),
    path("studies/<slug:slug>/workers/<str:pseudonym>/raw-id/", privacy_views.reveal, name="worker_raw_id"),
    path("studies/<slug:slug>/workers/<str:pseudonym>/delete/", privacy_views.delete, name="worker_delete"),
    path("studies/<slug:slug>/personal-data/scan/", privacy_views.scan_personal_data, name="scan_personal_data"),
    path("studies/<slug:slug>/data/<str:what>.<str:fmt>", views.study_data_export, name="study_data_export"),
    path("studies/<slug:slug>/plan/", plan_views.plan, name="study_plan"),
    path("studies/<slug:slug>/plan/<str:key>/", plan_views.plan_job, name="study_plan_job"),
    path("studies/<slug:slug>/plan/<str:key>/cancel/", plan_views.plan_cancel, name="study_plan_cancel"),
    path("studies/<slug:slug>/preregistrations/", plan_views.register, name="study_register"),
    path("studies/<slug:slug>/preregistrations/<int:pk>.json", plan_views.preregistration_file, name="preregistration"),
]
