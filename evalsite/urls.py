from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from evalsite.lockout import LoginView
from studies import views as study_views

urlpatterns = [
    path("", study_views.home, name="home"),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("studies.urls")),
    path("", include("chat.urls")),
    path("annotate/", include("annotation.urls")),
    path("", include("pairwise.urls")),
    path("", include("reports.urls")),
    path("", include("judges.urls")),
    path("", include("prolific.urls")),
]
