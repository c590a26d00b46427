"""Explaining prefix divergence between consecutive requests of a session.

Seed 000 section 4.4.3: reuse ends at the first changed token. ctxd keeps, per session
and wire format, a compact layout digest of the previous request (zone hashes, zone
token ends, the leaf's messages by seq and content hash) so that when a new request does
not extend the previous one, the manifest can say where (zone, event seq, token offset)
and why (eviction rewrote the trunk, the step moved, the template re-rendered a tail).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from app.domain.layout import Conversation, LeafMessage, begins_with
from app.domain.session_memo import SessionMemo


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def leaf_digest(m: LeafMessage) -> str:
    """16 hex chars of sha256 over the message's role, content, call id, reasoning and
    calls."""
    digest = hashlib.sha256()
    for part in (m.role, m.content, m.call_id or "", m.reasoning or "",
                 *(f"{c.call_id}\x1f{c.name}\x1f{c.arguments}" for c in m.tool_calls)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x1e")
    return digest.hexdigest()[:16]


#: key of the session memo's entry (``layout_digest(memo=...)``): the last digest's leaf
#: messages and entries, its trunk and the trunk's hash
_LAST_DIGEST = ("layout digest", "last")


def _root_sha(conversation: Conversation, memo: SessionMemo | None) -> str:
    """The root's hash (system text and tools), kept in ``memo`` while both are the same."""
    held = memo.root_digest if memo is not None else None
    if held is not None and held[0] == conversation.system and held[1] is conversation.tools:
        return held[2]
    sha = _sha([conversation.system, list(conversation.tools)])
    if memo is not None:
        memo.root_digest = (conversation.system, conversation.tools, sha)
    return sha


#: key of the session memo's entry of :func:`_root_sha`: the last root's system, tools and hash
_LAST_ROOT = ("layout digest", "root")


def layout_digest(conversation: Conversation, *, by_zone: Mapping[str, int], cut_seq: int,
                  memo: SessionMemo | None = None) -> dict[str, Any]:
    """A JSON-able digest of a request's layout (hashes, token ends by zone, leaf index).

    Each leaf message's entry ``[seq, role, digest]`` is computed once per message and kept
    in its own memo (``LeafMessage.memo``): a session's leaf is mostly its previous
    request's messages. ``memo`` (the session's leaf cache): the last digest's leaf entries
    and trunk hash are kept there, so a request whose leaf begins with the last one's
    (equal messages) takes those entries whole, and an equal trunk is not hashed again.
    The same digest either way."""
    messages = conversation.leaf
    held = memo.layout_digest if memo is not None else None
    leaf: list[Any] = []
    if held is not None and begins_with(messages, held[0]):
        leaf = list(held[1])
    done = len(leaf)
    for m in messages[done:]:
        entry = m.memo.get("digest")
        if entry is None:
            entry = m.memo["digest"] = [m.seq, m.role, leaf_digest(m)]
        leaf.append(entry)
    trunk_sha = held[3] if held is not None and held[2] == conversation.trunk else _sha(conversation.trunk)
    if memo is not None:
        memo.layout_digest = (messages, tuple(leaf), conversation.trunk, trunk_sha)
    root_end = int(by_zone["root"])
    return {
        "root_sha": _root_sha(conversation, memo),
        "trunk_sha": trunk_sha,
        "root_end": root_end,
        "trunk_end": root_end + int(by_zone["trunk"]),
        "cut_seq": cut_seq,
        "leaf": leaf,
    }


def explain_divergence(previous: Mapping[str, Any], current: Mapping[str, Any], offset: int) -> dict[str, Any]:
    """``{zone, seq, token_offset, reason}`` for a request that diverges from the previous
    one at token ``offset`` (tokens of the profile's tokenizer)."""
    if offset < min(previous["root_end"], current["root_end"]) or previous["root_sha"] != current["root_sha"]:
        return {"zone": "root", "seq": None, "token_offset": offset,
                "reason": "root changed: system instructions or tool declarations differ"}
    if offset < min(previous["trunk_end"], current["trunk_end"]) or previous["trunk_sha"] != current["trunk_sha"]:
        if current["cut_seq"] > previous["cut_seq"]:
            evicted = len({e[0] for e in previous["leaf"] if e[0] is not None and e[0] < current["cut_seq"]})
            reason = (f"budget: trunk rewritten after evicting the oldest turn groups "
                      f"({evicted} leaf messages moved behind handles, eq. 1)")
        else:
            reason = "trunk rewritten: the task contract or the elision note changed"
        return {"zone": "trunk", "seq": None, "token_offset": offset, "reason": reason}
    prev_leaf, cur_leaf = previous["leaf"], current["leaf"]
    current_seqs = {e[0] for e in cur_leaf}
    for i, entry in enumerate(prev_leaf):
        if i >= len(cur_leaf) or cur_leaf[i] != entry:
            seq, role = entry[0], entry[1]
            if seq not in current_seqs:
                reason = ("leaf message removed (evicted, or a retrieved document replaced by a later one with its "
                          "key)")
            elif i == len(prev_leaf) - 1 and role == "user":
                reason = "the next step stays last in the leaf: new events were placed before it"
            elif i < len(cur_leaf) and cur_leaf[i][0] == seq:
                reason = "leaf message re-rendered in place (a pending tool call got its result)"
            else:
                reason = ("leaf order changed: retrieved documents stay next to the instruction, so new events "
                          "were placed before them")
            return {"zone": "leaf", "seq": seq, "token_offset": offset, "reason": reason}
    return {"zone": "leaf", "seq": prev_leaf[-1][0] if prev_leaf else None, "token_offset": offset,
            "reason": "chat template re-rendered the end of the previous request "
                      "(e.g. its generation prompt, or consecutive tool results sharing one turn)"}
