#!/bin/bash
# Run once by the influxdb:2.7 image, on its first start, after its setup (docker-entrypoint-initdb.d): the influx
# CLI holds the admin token here, and the image exports the org's and bucket's IDs. Creates the stack's two tokens,
# each limited to the one bucket, and leaves each in the volume of the one service that reads it:
#   /etc/influxdb2/kneecap-master/token   write-only: the kneecap master's sink (INFLUX_TOKEN_FILE)
#   /etc/influxdb2/kneecap-grafana/token  read-only: Grafana's data source ($__file{...})
# The admin token never leaves this container (its CLI config, in the influxdb-config volume).
set -euo pipefail

token() {  # the "token" of `influx auth create --json`
    sed -n 's/^[[:space:]]*"token":[[:space:]]*"\([^"]*\)".*/\1/p'
}

write=$(influx auth create --org-id "${DOCKER_INFLUXDB_INIT_ORG_ID}" --write-bucket "${DOCKER_INFLUXDB_INIT_BUCKET_ID}" \
    --description "kneecap master: write ${DOCKER_INFLUXDB_INIT_BUCKET} only" --json | token)
read=$(influx auth create --org-id "${DOCKER_INFLUXDB_INIT_ORG_ID}" --read-bucket "${DOCKER_INFLUXDB_INIT_BUCKET_ID}" \
    --description "Grafana: read ${DOCKER_INFLUXDB_INIT_BUCKET} only" --json | token)
if [ -z "${write}" ] || [ -z "${read}" ]; then
    echo "kneecap-tokens: influx auth create gave no token" >&2
    exit 1
fi
# Grafana runs as its own user: the files are readable, and each volume is mounted into one service only.
printf '%s' "${write}" > /etc/influxdb2/kneecap-master/token
printf '%s' "${read}" > /etc/influxdb2/kneecap-grafana/token
chmod 0644 /etc/influxdb2/kneecap-master/token /etc/influxdb2/kneecap-grafana/token
echo "kneecap-tokens: a write-only token for the master and a read-only one for Grafana"
