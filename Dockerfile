# One image for every gpuobs service (web, worker, beat, the migration Job); docker-compose.yml
# and deploy/kubernetes pick the command. Two targets:
#   docker build -t gpuobs:0.1.0 .                        the default (Kubernetes, Prometheus,
#                                                          slurmrestd: no Slurm client needed)
#   docker build --target slurm -t gpuobs:0.1.0-slurm .  adds slurm-client and munge, for
#                                                          Slurm clusters read through the CLI
# The slurm target talks to the cluster's munged through its socket and reads its slurm.conf,
# both mounted (docs/operations.md, "Slurm access"). Slurm's commands must not be newer than
# the cluster's slurmctld: trixie ships Slurm 24.11; for an older cluster build from bookworm
# (Slurm 22.05): --build-arg PYTHON_IMAGE=python:3.11.17-slim-bookworm.
ARG PYTHON_IMAGE=python:3.11.17-slim-trixie

FROM ${PYTHON_IMAGE} AS app

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpuobs" \
      org.opencontainers.image.description="Observability and diagnosis dashboard for GPU clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.documentation="README.md, docs/operations.md"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=gpuobs.settings \
    DJANGO_DEBUG=0 \
    HOME=/tmp \
    GUNICORN_CMD_ARGS="-c python:gpuobs.gunicorn_conf"

WORKDIR /app

# The fairness PDF's font: CJK and math glyphs (diagnosis/reports/pdf.py). The distribution's
# current package, whatever its revision: the base image's tag pins the distribution.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends fonts-wqy-microhei \
 && rm -rf /var/lib/apt/lists/*

COPY requirements.txt requirements-tracing.txt ./
RUN pip install --no-cache-dir -r requirements.txt
# OpenTelemetry traces (docs/operations.md, "Traces"): --build-arg TRACING=1 adds the SDK
ARG TRACING=0
RUN if [ "$TRACING" = "1" ]; then pip install --no-cache-dir -r requirements-tracing.txt; fi

COPY manage.py ./
COPY gpuobs ./gpuobs
COPY diagnosis ./diagnosis
COPY templates ./templates
COPY locale ./locale
COPY static ./static

# Hashed, compressed static files for whitenoise (the key and host exist only for this step);
# the user is numeric (10001) so that Kubernetes's runAsNonRoot can check it; /app/var is the
# only place written besides /tmp (beat's schedule), so the root filesystem can be read-only.
RUN DJANGO_SECRET_KEY=collectstatic-only DJANGO_ALLOWED_HOSTS=localhost \
    python manage.py collectstatic --noinput \
 && groupadd --system --gid 10001 gpuobs \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin gpuobs \
 && mkdir -p /app/var \
 && chown 10001:10001 /app/var

USER 10001:10001
EXPOSE 8000

# The web's liveness (no database); compose's worker and beat replace it with their heartbeat
# checks, and Kubernetes ignores it for its own probes (deploy/kubernetes/base).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://localhost:8000/livez', timeout=5)"]

CMD ["gunicorn", "gpuobs.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]


# The Slurm variant: the client commands (sinfo, squeue, sacct, scontrol, sacctmgr) and munge's
# client library. It runs no munged of its own: mount the host's munge socket directory at
# /run/munge and its slurm.conf at /etc/slurm/slurm.conf (read-only).
FROM app AS slurm
USER 0
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends slurm-client munge \
 && rm -rf /var/lib/apt/lists/*
USER 10001:10001


# The default target (a plain `docker build`): the image without Slurm.
FROM app AS default
