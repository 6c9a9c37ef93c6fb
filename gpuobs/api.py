"""The one API router: every API endpoint is registered here and lives under /api/."""

from rest_framework.routers import DefaultRouter

from diagnosis.api.recommendations import RecommendationViewSet
from diagnosis.views import ClusterViewSet

router = DefaultRouter()
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("recommendations", RecommendationViewSet, basename="recommendation")
