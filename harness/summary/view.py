"""What every block of summary.json shares: the read-only Struct base, the schema's name, the load level's key. Pure."""

from __future__ import annotations

from msgspec import Struct

__all__ = ["READABLE_SCHEMAS", "SCHEMA", "View", "level_key", "level_unit"]

SCHEMA = "kneecap.summary/3"
READABLE_SCHEMAS = ("kneecap.summary/1", "kneecap.summary/2", SCHEMA)


class View(Struct, kw_only=True, frozen=True):
    """A block of summary.json: read-only, unknown keys ignored (each subclass is keyword-only too)."""


def level_key(mode: str) -> str:
    """The JSON key of a step's load level: ``users`` (closed loop) or ``rate_rps`` (open loop)."""
    return "rate_rps" if mode == "open" else "users"


def level_unit(mode: str) -> str:
    return "req/s" if mode == "open" else "users"
