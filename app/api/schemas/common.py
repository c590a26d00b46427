"""What the API schemas share: the base model, bounded identifiers and text, integer bounds."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character (U+0000): identifiers and the system text are stored as "
                         "SQL text, which cannot hold one (payloads and message text can)")
    return value


NoNul = AfterValidator(_no_nul)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("needs text other than whitespace")
    return value


#: text that must hold something other than whitespace (a plan, a conclusion, a child's goal)
NonBlank = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]
#: Event id prefixes of the events the server appends itself (``infer:``: the artifact writes
#: inferred from a declared shell tool's command, app/services/shell_inference.py); a client's
#: event id starting with one is 422, so it can never collide with (or pose as) an inferred one.
RESERVED_EVENT_ID_PREFIXES = ("infer:",)


def _not_reserved(value: str) -> str:
    for prefix in RESERVED_EVENT_ID_PREFIXES:
        if value.startswith(prefix):
            raise ValueError(f"event ids starting {prefix!r} are reserved for the events the server infers "
                             "from shell tool calls; use another id")
    return value


EventId = Annotated[str, Field(min_length=1, max_length=200), NoNul, AfterValidator(_not_reserved)]
CallId = Annotated[str, Field(min_length=1, max_length=200), NoNul]
ArtifactName = Annotated[str, Field(min_length=1, max_length=1024), NoNul]
#: A content hash (eq. 5): compared as a string and kept as SQL text with the artifact's
#: revision (issue 11), so bounded and without NUL; ctxd's adapters send SHA-256 hex.
ContentHash = Annotated[str, Field(min_length=1, max_length=256), NoNul]
#: The largest row id (a signed 64-bit BIGINT on PostgreSQL, INTEGER on SQLite): a larger id in a
#: path or query is 422, not an overflow in the database driver (a 500).
ROW_ID_MAX = 2**63 - 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The largest integer a field takes: JSON's exact range (2**53 - 1). A larger version or revision
#: was accepted and then failed as a 500 when the layout state was serialised (orjson's 64-bit limit).
MAX_JSON_INT = 2**53 - 1
