"""WSGI entry point: ``gunicorn gpuobs.wsgi:application``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
# the web's database statements end before gunicorn's worker timeout (gpuobs/settings.py)
os.environ.setdefault("GPUOBS_WEB_PROCESS", "1")

application = get_wsgi_application()
