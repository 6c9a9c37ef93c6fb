"""gunicorn's settings for gpuobs: its error and access lines in gpuobs's log format
(``GPUOBS_LOG_FORMAT``), each access line with the request's ``X-Request-ID`` (gpuobs/logs.py;
docs/operations.md, "Logs"). The image loads it through ``GUNICORN_CMD_ARGS``
(``-c python:gpuobs.gunicorn_conf``); a command line of its own may add ``-c`` the same way."""

from gpuobs.logs import gunicorn_logconfig

logconfig_dict = gunicorn_logconfig()
access_log_format = '%(h)s "%(r)s" %(s)s %(B)s %(D)sus request=%({x-request-id}o)s'
