from django.urls import path

from chat import views

app_name = "chat"
urlpatterns = [
    path("chat/<int:session_id>/", views.session_page, name="session"),
    path("chat/<int:session_id>/end/", views.end, name="end"),
    path("chat/<int:session_id>/rate/", views.rate, name="rate"),
    path("chat/<int:session_id>/wait/", views.wait, name="wait"),
]
