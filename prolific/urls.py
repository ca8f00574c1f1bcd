from django.urls import URLPattern, path

from prolific import views

app_name = "prolific"
urlpatterns: list[URLPattern] = [
    path("studies/<slug:slug>/prolific/", views.prolific_page, name="study"),
    path("studies/<slug:slug>/prolific/waves/", views.add_wave, name="add_wave"),
    path("studies/<slug:slug>/prolific/waves/<int:pk>/sync/", views.sync, name="sync"),
    path("studies/<slug:slug>/prolific/waves/<int:pk>/submissions/<int:sub>/", views.decide, name="decide"),
    path("studies/<slug:slug>/prolific/waves/<int:pk>/approve-clean/", views.approve_clean, name="approve_clean"),
    path("studies/<slug:slug>/prolific/waves/<int:pk>/bonuses/", views.bonuses, name="bonuses"),
    path("studies/<slug:slug>/prolific/waves/<int:pk>/next-group/", views.move, name="move"),
    path("prolific/hooks/", views.webhook, name="webhook"),
]
