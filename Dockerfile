# One image for every kneecap role (simulator, Locust master, workers).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY harness ./harness
RUN pip install --no-cache-dir .
ENTRYPOINT ["kneecap"]
