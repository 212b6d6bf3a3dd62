"""Where results go: files (summary.json, requests.jsonl) and, when configured, InfluxDB."""
