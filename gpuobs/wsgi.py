"""WSGI entry point: ``gunicorn gpuobs.wsgi:application``."""

import os

from django.core.wsgi import get_wsgi_application

from gpuobs import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
# the web's database statements end before gunicorn's worker timeout (gpuobs/settings.py)
os.environ.setdefault("GPUOBS_WEB_PROCESS", "1")

tracing.configure("web")  # before the handler loads its middleware; nothing when off

application = get_wsgi_application()

from diagnosis.apps import build_plugin_registries  # noqa: E402 -- once Django is set up

build_plugin_registries()  # a duplicate rule id stops the web process here

from diagnosis.actions.enqueue import run_impacts_in_background  # noqa: E402

run_impacts_in_background()  # the embedded mode: impact estimates outside the requests
