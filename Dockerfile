# One image for every kneecap role: simulator (kneecap sim), Locust master and workers (locust -f locustfile.py).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY harness ./harness
RUN pip install --no-cache-dir .
COPY locustfile.py ./
COPY scenarios ./scenarios
# Default: the whole headless job against the built-in simulator. docker-compose.yml sets each role's command.
CMD ["kneecap", "run"]
