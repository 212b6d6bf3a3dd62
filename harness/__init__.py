"""kneecap: distributed load testing for LLM inference endpoints."""
