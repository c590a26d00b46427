"""Recall schemas: event pages and search results."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)


class EventPage(BaseModel):
    session_id: str
    representation: Literal["summary", "full"]
    events: list[dict[str, Any]] = Field(description="events in seq order: seq, event_id, kind, created_at and the "
                                         "stored fields (handle; a redacted tool output's view); full: a tool "
                                         "result's payload; summary: payload_summary / content_summary (head, lines, "
                                         "chars, truncated)")
    next_after_seq: int | None = Field(description="pass as `after_seq` for the next page; null on the last page")


class SearchMatch(BaseModel):
    field: str = Field(description="payload (a tool result's rendered text), content, reasoning, tool_calls, text, "
                                   "artifact")
    handle: str | None = Field(description="payload matches: the handle whose `?lines=` slices these lines; else null")
    lines: str = Field(description="a:b, 1-based, inclusive")
    start_line: int
    end_line: int
    exact: bool = Field(description="a match with the query's case")
    word: bool = Field(description="an exact match standing alone (no letter, digit or _ either side)")
    matches: int = Field(description="occurrences in this range")
    text: str = Field(description="the lines when they hold at most 400 characters, else a window of at most 400 "
                                  "around the first match with each cut side marked `[... N chars]`")
    offset: int = Field(description="the first match's UTF-8 byte offset in the field's text (a payload: in the "
                                    "handle's bytes, for `GET .../handles/{handle}?offset=&length=`)")
    length: int = Field(description="the first match's length in UTF-8 bytes")
    cut_before: int | None = Field(default=None, description="characters of the lines left out before the window")
    cut_after: int | None = Field(default=None, description="characters of the lines left out after the window")


class SearchHit(BaseModel):
    model_config = ConfigDict(extra="allow")  # role, call_id
    seq: int
    event_id: str
    kind: str
    rank: Literal["word", "exact", "case_insensitive"]
    handle: str | None
    match_count: int
    matches: list[SearchMatch]


class SearchResult(BaseModel):
    session_id: str
    query: str
    hits: list[SearchHit]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")
    capped: bool = Field(description="more indexed texts held the query than one search ranks (2000, newest first)")
