"""The eval's append policy counts with the profile's chat template kwargs (ctxd_tools/eval/policies.py
``as_sent_meter``): before, its sibling meter dropped them, so append under qwen3-nothink
(``enable_thinking = false``) counted exactly qwen3's totals."""

from __future__ import annotations

from app.domain.layout import Conversation
from app.settings import Settings
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry, load_profiles
from app.tokenizers.segments import LocalLRUCache
from ctxd_tools.eval.policies import as_sent_meter

CONVERSATION = Conversation(system="You are a careful engineer.", tools=(), trunk="List the files.", leaf=())


def _meter(name: str) -> object:
    settings = Settings()
    profiles = ProfileRegistry(load_profiles(settings.profiles_path))
    return MeterRegistry(LocalLRUCache(1 << 20)).get(profiles.get(name))


def test_the_as_sent_meter_keeps_enable_thinking_false() -> None:
    thinking, nothink = as_sent_meter(_meter("qwen3")), as_sent_meter(_meter("qwen3-nothink"))
    assert nothink.template_kwargs == {"enable_thinking": False}  # type: ignore[attr-defined]
    assert nothink.render_reasoning  # type: ignore[attr-defined]
    # the empty think block the template appends to the generation prompt: 4 more tokens
    assert nothink.measure(CONVERSATION).total == thinking.measure(CONVERSATION).total + 4  # type: ignore[attr-defined]
