"""Manifest schemas (response models: they document the GET answers in the OpenAPI document;
the routes return pre-serialized bytes, see app/api/routes/v1.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from app.domain.manifest import Representation


class Described(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokensOut(Described):
    """Exact tokens of the rendered request (profile tokenizer, chat framing included)."""

    total: int
    by_zone: dict[Literal["root", "trunk", "leaf"], int]
    by_role: dict[Literal["system", "tools", "task_state", "observations"], int]


class BudgetOut(Described):
    """Eq. 1: ``input_limit = window - output_reserve - headroom`` (tokens)."""

    window: int
    output_reserve: int
    headroom: int
    input_limit: int
    t_lo: int | None = Field(default=None, description="compaction target T_lo (tokens; the window policy's "
                             "eviction target)")
    low_watermark: int = Field(description="T_lo under its former name (tokens)")
    role_limits: dict[str, int] = Field(description="each budget role's planning share of input_limit (tokens)")


class DivergenceOut(Described):
    zone: Literal["root", "trunk", "leaf"]
    seq: int | None
    token_offset: int
    reason: str


class CacheOut(Described):
    """Prefix reuse against the previous request of the session in the same format."""

    model: Literal["vllm_blocks", "openai", "anthropic", "none"]
    block_size: int
    predicted_cached_tokens: int
    uncached_tokens: int
    previous_tokens: int
    common_prefix_tokens: int
    common_prefix_exact: bool
    extends_previous: bool
    breakpoints: list[int] | None = Field(default=None, description="cache_control token offsets (anthropic)")
    first_divergence: DivergenceOut | None = Field(default=None, description="set when the request does not "
                                                   "extend the previous one")


class LayoutOut(Described):
    root: str
    trunk: str
    leaf: str
    cut_seq: int = Field(description="seq of the first kept turn group; earlier groups are elided")
    version: int | None = Field(default=None, description="version of the session's layout state")
    evicted_now: int
    elision_index: list[str] = Field(description="handles of the index payloads the elision note names")


class TransformOut(Described):
    name: str
    count: int | None = None
    note: str = ""


class WriteOut(Described):
    """The change that first superseded a historical observation (issue 11)."""

    artifact: str
    revision: int = Field(description="the revision the change created (the server's counter)")
    seq: int = Field(description="seq of the change's event")
    event_id: str
    cause: Literal["write", "external"] = Field(description="write: an artifact_write event; external: a read whose "
                                                "content hash matched no logged write")


class InvalidationChoiceOut(Described):
    """How a historical or possibly stale observation is shown (seed 000 table 9) and its cost."""

    choice: Literal["tombstone", "notice", "deferred"] = Field(
        description="tombstone: replaced in place; notice: kept, a notice appended; deferred: a tombstone waiting for "
                    "the next trunk rewrite, a notice shown meanwhile")
    tokens: int | None = Field(default=None, description="tokens of the tombstone")
    replaced_tokens: int | None = Field(default=None, description="tokens of the output the tombstone replaces")
    stale_tokens_kept: int | None = Field(default=None, description="tokens of the stale output left in the request")
    cache: str = Field(description="the choice's effect on prefix reuse")


class ItemOut(Described):
    """One event as the manifest accounts for it."""

    seq: int
    event_id: str
    kind: Literal["message", "tool_result", "artifact_write", "step", "hypothesis", "obligation", "plan", "document",
                  "conclusion", "child_conclusion"]
    handle: str | None = None
    call_id: str | None = None
    bytes: int | None = Field(default=None, description="payload bytes (UTF-8) of a tool result")
    lines: int | None = Field(default=None, description='payload lines ("\\n") of a tool result')
    tokens_known: bool | None = Field(default=None, description="whether the tool result's payload tokens are "
                                      "known yet (counted once after its POST)")
    tokens: int | None = Field(default=None, description=(
        "a tool result: its payload's tokens (the whole payload, no framing), when known; a user or assistant "
        "message in the leaf: the tokens it adds to the rendered request, chat framing included (exact, from the "
        "request's own count; absent where the profile's meter cannot attribute them, e.g. a mistral-tekken user "
        "message merged into the [INST] block before it)"))
    zone: Literal["root", "trunk", "leaf"] | None
    representation: Representation
    why: str
    elided_bytes: int | None = Field(default=None, description="bytes a head + tail cut leaves out")
    elided_lines: list[int] | None = Field(default=None, description="[first, last] line a head + tail cut leaves "
                                           "out (read them back with ?lines=first:last)")
    elided_tokens: int | None = Field(default=None, description="tokens cut out of a head + tail result, when known")
    pending_calls: list[str] | None = None
    transforms: list[TransformOut] | None = Field(default=None, description="changes applied to the text on its way "
                                                  "into the request, in the order applied")
    state: Literal["current", "historical", "possibly_stale", "unknown", "unbound"] | None = Field(
        default=None, description="a tool result's support (issue 11): current: bound, nothing changed since; "
                                  "historical: true of the revision it read, no longer of the current one; "
                                  "possibly_stale: an external read past its TTL; unknown: the command's effect is "
                                  "unknown; unbound: no binding")
    bindings: list[str] | None = Field(default=None, description="what the tool result read, path@rN[ lines a:b]")
    superseded_by: list[str] | None = Field(default=None, description="the writes that made it historical, path@rN")
    write: WriteOut | None = Field(default=None, description="the first of those writes")
    fetched_at: float | None = Field(default=None, description="an external read's fetch time (epoch seconds)")
    expires_at: float | None = Field(default=None, description="fetched_at + its TTL (epoch seconds)")
    invalidation: InvalidationChoiceOut | None = Field(default=None, description="how it is shown, when not current")


class EventRangeOut(Described):
    """Older events accounted for together (the manifest stays bounded by the window)."""

    seq_from: int
    seq_to: int
    events: int
    representations: dict[Representation, int]
    tokens: int = Field(description="payload tokens of the elided tool results in the range (the known counts)")
    bytes: int | None = Field(default=None, description="payload bytes of the elided tool results in the range")
    tokens_known: bool | None = Field(default=None, description="false while some result's count is not known yet")
    index: str | None = Field(description="handle of the index payload naming their turn and result handles")
    why: str


class NoticeOut(Described):
    after_seq: int = Field(description="the notice follows the turn group starting at this seq")
    tokens: int


class InvalidationOut(Described):
    """The request's invalidation summary (issue 11; seed 000 table 9)."""

    mode: Literal["auto", "tombstone", "notice"] = Field(description="the session's metadata.invalidation")
    pass_due: bool = Field(description="a trunk rewrite was due: tombstones of new changes wait for it")
    deferred: list[int] = Field(description="seqs of the changes whose tombstones wait for the next trunk rewrite")
    shown_upto: int = Field(description="the latest change seq whose tombstones were shown")
    historical: int = Field(description="historical observations in the request")
    tombstones: int
    tombstone_tokens: int
    replaced_tokens: int = Field(description="tokens of the outputs the tombstones replace")
    noticed: int = Field(description="historical or possibly stale observations kept with a notice")
    stale_tokens_kept: int = Field(description="tokens of those outputs, still in the request")
    notices: list[NoticeOut]
    notice_tokens: int
    presented: list[str] = Field(description="revisions (path@rN) the request presents as current: what an action "
                                             "planned on it assumes (POST /preconditions checks them)")


class ManifestOut(Described):
    """What the request contains and why (persisted under ``id``)."""

    session_id: str
    profile: str
    format: Literal["openai", "anthropic", "tokens"]
    last_seq: int
    request_sha256: str = Field(description="sha256 of the request body's JSON bytes")
    tokens: TokensOut
    budget: BudgetOut
    cache: CacheOut
    layout: LayoutOut
    items: list[ItemOut]
    elided: list[ItemOut] = Field(description="evicted events of the newest evicted turn groups, each with its handle")
    invalidation: InvalidationOut | None = Field(default=None, description="superseded observations and how they "
                                                 "are shown")
    elided_tokens: int
    elided_tokens_exact: bool | None = Field(default=None, description="false while some elided or cut output's "
                                             "token count is not known yet (elided_tokens sums the known ones)")
    layout_warnings: list[str]
    ranges: list[EventRangeOut] | None = Field(default=None, description="older events accounted for together")
    compaction: dict[str, Any] | None = Field(default=None, description="select's compaction: policy, whether this "
                                              "request ran a pass, watermarks, the pass forecast (tokens, growth "
                                              "per call, N, due), the progress record's fold point, tokens, budget "
                                              "and source: deterministic or model-written, with wait {seconds, ran_out} "
                                              "when the pass's GET waited for the summarizer (issue 10)")
    id: int


class AssembledRequest(BaseModel):
    request: dict[str, Any] = Field(description="the wire body for the requested format, to send as is")
    manifest: ManifestOut


class ManifestSummaryOut(Described):
    id: int
    format: str
    last_seq: int
    request_sha256: str
    tokens_total: int
    created_at: str


class ManifestList(Described):
    session_id: str
    manifests: list[ManifestSummaryOut]
    next_before_id: int | None
