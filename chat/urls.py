from django.urls import path

from chat import views

app_name = "chat"
urlpatterns = [
    path("s/<slug:slug>/next/", views.next_step, name="next"),
    path("s/<slug:slug>/done/", views.done, name="done"),
    path("chat/<int:session_id>/", views.session_page, name="session"),
    path("chat/<int:session_id>/end/", views.end, name="end"),
    path("chat/<int:session_id>/rate/", views.rate, name="rate"),
    path("chat/<int:session_id>/wait/", views.wait, name="wait"),
]
