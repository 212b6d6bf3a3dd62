# One image for every kneecap role: simulator (kneecap sim), Locust master and workers (locust -f locustfile.py).
#   docker build -t REGISTRY/kneecap:0.1.0 .      (deploy/k8s expects the tag in its kustomization's images)
# No HEALTHCHECK: each role is probed by what runs it (compose's healthchecks, deploy/k8s's probes), and a worker
# has no port to ask.
#checkov:skip=CKV_DOCKER_2:one image for three roles; compose and Kubernetes probe each role, a worker has no port
FROM python:3.11-slim
# A fixed non-root user: deploy/k8s runs as 10001 (runAsUser); a high UID is nobody's on the host.
RUN groupadd --gid 10001 kneecap \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin kneecap
# Read-only root filesystem in Kubernetes: nothing writes .pyc at run time (compiled below), matplotlib's cache goes
# to /tmp (an emptyDir there), and logs are not held in a buffer when a pod dies.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /app
COPY pyproject.toml README.md ./
COPY harness ./harness
RUN pip install --no-cache-dir .
COPY locustfile.py ./
COPY scenarios ./scenarios
# locustfile.py imports harness from /app (Locust puts the locustfile's folder first on sys.path), so compile it here.
# /app/results is the one place the default command writes (Kubernetes mounts an emptyDir there).
RUN python -m compileall -q /app/harness /app/locustfile.py && install -d -o 10001 -g 10001 /app/results
USER 10001:10001
# Default: the whole headless job against the built-in simulator. docker-compose.yml and deploy/k8s set each role's
# command.
CMD ["kneecap", "run"]
