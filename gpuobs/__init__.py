"""The gpuobs Django project. Importing it loads the Celery app, so shared tasks bind to it."""

from .celery import app as celery_app

# The release, as pyproject.toml says (a test checks they agree); gpuobs_build_info and the
# image's OCI labels carry it. Tags are v<version> (docs/operations.md, "Releases").
__version__ = "0.1.0"

__all__ = ["__version__", "celery_app"]
