"""The pure planner (app/domain/planner.py): no I/O, deterministic, the layout state a plan
persists is a fixed point, remembered ids trusted only when they match the stored state."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.domain.budget import Budget
from app.domain.layout import Conversation
from app.domain.manifest import Item, Manifest, Representation
from app.domain.planner import Policy, plan_request
from app.domain.ports import Measurement
from app.domain.prefix import CacheModel
from app.domain.state import LayoutState, SessionState
from app.domain.types import StepEvent
from tests.unit.test_window_policy import SESSION, session_events
from tests.unit.wordmeter import WordMeter

MODEL = CacheModel.vllm_blocks(4)


class IdsWordMeter(WordMeter):
    """WordMeter with token ids: one id per word (crc32), framing as fixed ids."""

    def measure(self, conversation: Conversation) -> Measurement:
        m = super().measure(conversation)
        texts = [conversation.system, json.dumps(list(conversation.tools)), conversation.trunk]
        texts += [f"{x.role} {x.content} " + " ".join(c.arguments for c in x.tool_calls) for x in conversation.leaf]
        ids: list[int] = []
        for text in texts:
            ids += [1, 2, 3, 4] + [zlib.crc32(w.encode()) for w in text.split()]
        return replace(m, total=len(ids), by_zone={"root": len(ids) - m.by_zone["trunk"] - m.by_zone["leaf"],
                                                    "trunk": m.by_zone["trunk"], "leaf": m.by_zone["leaf"]},
                       ids=ids)


NO_LAYOUT = LayoutState()


class JsonWire:
    """A WireFormat: the conversation as canonical JSON."""

    name = "openai"
    zones: ClassVar[Mapping[str, str]] = {"root": "system", "trunk": "trunk", "leaf": "leaf"}
    cache_breakpoints = False

    def serialize(self, conversation: Conversation, measurement: Measurement) -> tuple[dict[str, Any], bytes]:
        body = {"system": conversation.system, "trunk": conversation.trunk,
                "leaf": [[m.role, m.content, m.call_id] for m in conversation.leaf]}
        return body, json.dumps(body, sort_keys=True).encode()

    def layout_warnings(self, conversation: Conversation) -> list[str]:
        return []


def plan(events: list, layout: LayoutState = NO_LAYOUT, *, limit: int = 400, **kwargs: Any):
    budget = Budget(window=limit + 20, output_reserve=10, headroom=10, low_watermark=limit // 2)
    state = SessionState(session=SESSION, last_seq=max((e.seq for e in events), default=0), layout=layout)
    return plan_request(state, events, policy=Policy("unit", budget, item_cap_tokens=60), wire=JsonWire(),
                        cache_model=MODEL, meter=IdsWordMeter(), **kwargs)


def test_equal_inputs_give_equal_plans_and_the_manifest_round_trips() -> None:
    events = session_events([[30], [80, 5], [10]]) + [StepEvent(seq=7, event_id="s", text="write the test")]
    first, second = plan(events), plan(events)
    assert first.body_bytes == second.body_bytes
    assert first.manifest == second.manifest
    m = first.manifest
    assert Manifest.from_json(m.to_json()) == m
    reps = {i.representation for i in m.items}
    assert {Representation.VERBATIM, Representation.HEAD_TAIL} <= reps
    assert all(isinstance(i, Item) for i in m.items + m.elided)
    assert m.request_sha256 and m.cache.previous_tokens == 0 and not m.cache.extends_previous


@settings(max_examples=40, deadline=None)
@example([[60, 60, 60]] * 10)  # crosses the trigger
@given(st.lists(st.lists(st.integers(1, 90), min_size=1, max_size=3), min_size=1, max_size=14))
def test_the_persisted_layout_state_is_a_fixed_point(turns: list[list[int]]) -> None:
    """Planning again from the layout state a plan decided, on the same events, serves the
    same body and decides nothing: a GET never changes what an identical GET returns."""
    events = session_events(turns)
    first = plan(events, limit=1200)
    again = plan(events, first.layout, limit=1200)
    assert again.body_bytes == first.body_bytes
    assert not again.layout_changed and again.layout == first.layout
    assert first.layout_changed == (first.layout.cut_seq > 0)
    assert first.layout.version == (1 if first.layout_changed else 0)
    if turns == [[60, 60, 60]] * 10:
        assert first.layout_changed and first.manifest.layout.evicted_now > 0


def test_remembered_ids_are_used_only_when_they_match_the_stored_state() -> None:
    """Requests 1 and 2 have equal lengths; a worker that remembers request 1 while the
    stored state is request 2's must report what a worker holding request 2 reports."""
    base = session_events([[20]])
    one = plan(base + [StepEvent(seq=3, event_id="s1", text="run the tests")])
    events = base + [StepEvent(seq=3, event_id="s1", text="run the tests"),
                     StepEvent(seq=4, event_id="s2", text="fix the tests")]
    two = plan(events, previous=one.previous, remembered=one.remembered)
    assert two.manifest.tokens.total == one.manifest.tokens.total and two.body_bytes != one.body_bytes
    holding_two = plan(events, previous=two.previous, remembered=two.remembered)
    holding_one = plan(events, previous=two.previous, remembered=one.remembered)
    holding_none = plan(events, previous=two.previous)
    assert holding_two.manifest.cache.extends_previous and holding_two.manifest.cache.common_prefix_exact
    assert holding_one.manifest.cache == holding_two.manifest.cache == holding_none.manifest.cache
