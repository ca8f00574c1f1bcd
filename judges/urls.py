from django.urls import path

from judges import views

app_name = "judges"
urlpatterns = [
    path("studies/<slug:slug>/judges/", views.judges_page, name="study"),
    path("studies/<slug:slug>/judges.json", views.judges_json, name="study_json"),
    path("studies/<slug:slug>/judges/add/", views.add_judge, name="add"),
    path("studies/<slug:slug>/judges/<int:pk>/run/", views.run_judge, name="run"),
    path("studies/<slug:slug>/judges/sample/", views.draw_sample, name="sample"),
    path("studies/<slug:slug>/judges/blinding/", views.scan_blinding, name="blinding"),
]
