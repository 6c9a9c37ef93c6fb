from django.urls import path

from diagnosis import views

app_name = "diagnosis"

urlpatterns = [
    path("", views.overview, name="overview"),
]
