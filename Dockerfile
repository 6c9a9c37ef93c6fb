# One image for every gpuobs service (web, worker, beat); docker-compose.yml picks the command.
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=gpuobs.settings \
    DJANGO_DEBUG=0 \
    GUNICORN_CMD_ARGS="-c python:gpuobs.gunicorn_conf"

WORKDIR /app

# The fairness PDF's font: CJK and math glyphs (diagnosis/reports/pdf.py)
RUN apt-get update \
 && apt-get install -y --no-install-recommends fonts-wqy-microhei \
 && rm -rf /var/lib/apt/lists/*

COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY manage.py ./
COPY gpuobs ./gpuobs
COPY diagnosis ./diagnosis
COPY templates ./templates
COPY locale ./locale
COPY static ./static

# Hashed, compressed static files for whitenoise. The key and host exist only for this step.
RUN DJANGO_SECRET_KEY=collectstatic-only DJANGO_ALLOWED_HOSTS=localhost \
    python manage.py collectstatic --noinput \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin gpuobs \
 && mkdir -p /app/var \
 && chown gpuobs /app/var

USER gpuobs
EXPOSE 8000

CMD ["gunicorn", "gpuobs.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
