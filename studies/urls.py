from django.urls import URLPattern, path

from studies import entry, preview, questionedit, team, views

app_name = "studies"
urlpatterns: list[URLPattern] = [
    # researcher pages (staff only)
    path("studies/", views.study_list, name="list"),
    path("studies/new/", views.study_create, name="create"),
    path("studies/card-banks/import/", views.card_bank_import, name="card_bank_import"),
    path("studies/card-banks/<str:bank>/download/", views.card_bank_download, name="card_bank_download"),
    path("studies/<slug:slug>/card-script.json", views.card_script_download, name="card_script_download"),
    path("studies/<slug:slug>/", views.study_detail, name="detail"),
    path("studies/<slug:slug>/edit/", views.study_edit, name="edit"),
    path("studies/<slug:slug>/status/", views.study_set_status, name="status"),
    path("studies/<slug:slug>/default-metrics/", views.study_add_default_metrics, name="default_metrics"),
    path("studies/<slug:slug>/invite/", views.study_invite, name="invite"),
    path("studies/<slug:slug>/sharing/", views.study_share, name="share"),
    path("studies/<slug:slug>/team/invite/", team.invite, name="team_invite"),
    path("studies/<slug:slug>/team/invitations/<int:pk>/withdraw/", team.revoke, name="team_revoke"),
    path("team/join/<str:key>/", team.join, name="team_join"),
    path("studies/<slug:slug>/questions/add/", questionedit.add, name="question_add"),
    path("studies/<slug:slug>/questions/<int:pk>/delete/", questionedit.delete, name="question_delete"),
    path("studies/<slug:slug>/preview/", preview.start, name="preview"),
    path("studies/<slug:slug>/preview/end/", preview.end, name="preview_end"),
    path("studies/<slug:slug>/checks/", views.study_check_arms, name="check_arms"),
    path("studies/<slug:slug>/readiness/", views.study_readiness, name="readiness"),
    path("studies/<slug:slug>/jobs/", views.study_jobs, name="jobs"),
    path("studies/<slug:slug>/memory-updates/<int:pk>/<str:action>/", views.memory_decision, name="memory_decision"),
    path("studies/<slug:slug>/jobs/take-back/", views.study_jobs_sweep, name="jobs_sweep"),
    path("studies/<slug:slug>/episodes/<int:pk>/", views.episode_detail, name="episode"),
    # the crowdworker's way in (studies/entry.py); from consent on, the worker's pages are chat's
    path("s/<slug:slug>/", entry.entry, name="entry"),
    path("s/<slug:slug>/join/<str:token>/", entry.invite, name="join"),
    path("s/<slug:slug>/resume/<str:token>/", entry.resume, name="resume"),
    path("s/<slug:slug>/consent/", entry.consent, name="consent"),
    path("s/<slug:slug>/declined/", entry.declined, name="declined"),
    path("s/<slug:slug>/resume-code/", entry.resume_code, name="resume_code"),
]
