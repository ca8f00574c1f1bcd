from django.urls import path

from chat import questionnaire, views

app_name = "chat"
urlpatterns = [
    path("s/<slug:slug>/next/", views.next_step, name="next"),
    path("s/<slug:slug>/done/", views.done, name="done"),
    path("s/<slug:slug>/questions/<str:block>/", questionnaire.block_page, name="questions"),
    path("s/<slug:slug>/check/", questionnaire.comprehension, name="comprehension"),
    path("s/<slug:slug>/stopped/", questionnaire.check_failed, name="check_failed"),
    path("chat/<int:session_id>/", views.session_page, name="session"),
    path("chat/<int:session_id>/end/", views.end, name="end"),
    path("chat/<int:session_id>/rate/", views.rate, name="rate"),
    path("chat/<int:session_id>/wait/", views.wait, name="wait"),
]
