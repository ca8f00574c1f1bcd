from django.urls import path

from pairwise import researcher_views, views

app_name = "pairwise"
urlpatterns = [
    # judges
    path("p/<slug:slug>/", views.entry, name="entry"),
    path("p/<slug:slug>/annotate/", views.annotate, name="annotate"),
    path("p/<slug:slug>/consent/", views.consent, name="consent"),
    path("p/<slug:slug>/next/", views.next_pair, name="next"),
    path("p/<slug:slug>/pairs/<int:pk>/", views.pair, name="pair"),
    path("p/<slug:slug>/done/", views.done, name="done"),
    # researchers
    path("studies/<slug:slug>/comparisons/", researcher_views.comparisons, name="list"),
    path("studies/<slug:slug>/comparisons/<int:pk>/", researcher_views.detail, name="detail"),
    path("studies/<slug:slug>/comparisons/<int:pk>/status/", researcher_views.set_status, name="status"),
    path("studies/<slug:slug>/comparisons/<int:pk>/votes.<str:fmt>", researcher_views.votes_export, name="votes"),
]
