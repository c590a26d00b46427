"""Profile registry: model-specific facts (DESIGN.md section 2) from a TOML file shipped
with the package, optionally overridden by ``CTXD_PROFILES_PATH``."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from app.domain.budget import Budget
from app.domain.compaction.user_text import SECTION_TOKENS
from app.domain.compaction.watermarks import Watermarks
from app.domain.errors import UnknownProfile


@dataclass(frozen=True)
class Profile:
    """One model profile. Sizes in tokens; prices in USD per million tokens."""

    name: str
    model: str
    tokenizer: Mapping[str, Any]
    window: int
    output_reserve: int
    headroom: int
    item_cap_tokens: int
    #: compaction watermarks (seed 000 eq. 3): a pass runs past ``t_hi`` and brings the request
    #: to at most ``t_lo`` (select); window evicts past ``input_limit`` down to ``t_lo``.
    #: ``t_lo`` replaces the former ``low_watermark`` (still read as its alias).
    t_hi: int | None = None
    t_lo: int | None = None
    keep_groups: int = 3  # K: the newest turn groups a pass never folds
    record_tokens: int | None = None  # the progress record's budget (default: the task_state share)
    #: the budget of the record's section "What the user said" (default: SECTION_TOKENS, 2,048)
    user_text_tokens: int | None = None
    render_reasoning: bool = False
    #: issue 14 item 3: add the ``recall`` tool declaration (app/domain/recall.py) after the
    #: session's tools in every request (off by default)
    recall: bool = False
    #: keyword arguments the serving engine passes to the chat template (vLLM and SGLang
    #: ``chat_template_kwargs``, e.g. Qwen3's ``enable_thinking = false``): rendered in the
    #: count and the tokens format, sent in the openai body
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)
    cache: Mapping[str, Any] = field(default_factory=dict)
    prices: Mapping[str, float] = field(default_factory=dict)

    @property
    def budget(self) -> Budget:
        return Budget(
            window=self.window,
            output_reserve=self.output_reserve,
            headroom=self.headroom,
            shares=dict(self.shares),
            low_watermark=self.t_lo,
        )

    @property
    def low_watermark(self) -> int | None:
        """The window policy's eviction target: ``t_lo`` (its former name)."""
        return self.t_lo

    @property
    def watermarks(self) -> Watermarks:
        """The select policy's compaction settings (eq. 3). Defaults: ``t_hi`` = half of
        ``input_limit``, ``t_lo`` = 60% of ``t_hi``, the record budget = the task_state
        share (or a tenth of ``input_limit``); without ``t_hi``, a ``t_lo`` of half the limit
        or more (a legacy ``low_watermark``) takes ``t_hi = input_limit``. Raises ValueError on settings breaking
        ``0 < t_lo < t_hi <= input_limit``."""
        limit = self.budget.input_limit
        t_hi = self.t_hi
        if t_hi is None:  # half the limit, or all of it above a legacy low watermark past half
            t_hi = limit // 2 if self.t_lo is None or self.t_lo < limit // 2 else limit
        t_lo = self.t_lo if self.t_lo is not None else int(t_hi * 0.6)
        record = self.record_tokens if self.record_tokens is not None else \
            (self.budget.role_limits()["task_state"] or limit // 10)
        user = self.user_text_tokens if self.user_text_tokens is not None else SECTION_TOKENS
        return Watermarks(t_hi=t_hi, t_lo=t_lo, keep_groups=self.keep_groups, record_tokens=record,
                          user_text_tokens=user).check(limit)


RENDER_CACHES = ("native", "placeholders", "none")  # app/tokenizers/hf.py


def _template_kwargs(value: Any, tokenizer: Mapping[str, Any]) -> dict[str, Any]:
    """``chat_template_kwargs``: a table of JSON values, for a tokenizer with a chat template
    (mistral-common renders without one, so the mistral_tekken kind takes none)."""
    if not isinstance(value, Mapping):
        raise TypeError("chat_template_kwargs must be a table")
    if value and tokenizer.get("kind") == "mistral_tekken":
        raise ValueError("chat_template_kwargs: the mistral_tekken tokenizer has no chat template to pass them to")
    json.dumps(value)  # TOML dates and times are not JSON: TypeError
    return dict(value)


def _flag(value: Any, name: str) -> bool:
    """A TOML boolean (a string such as "false" would read as true: refused)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, not {value!r}")  # noqa: TRY004  (a profile file error: load_profiles reports ValueError)
    return value


def _parse(name: str, raw: Mapping[str, Any]) -> Profile:
    try:
        profile = Profile(
            name=name,
            model=str(raw["model"]),
            tokenizer=dict(raw["tokenizer"]),
            window=int(raw["window"]),
            output_reserve=int(raw["output_reserve"]),
            headroom=int(raw.get("headroom", 0)),
            item_cap_tokens=int(raw.get("item_cap_tokens", 2048)),
            t_hi=int(raw["t_hi"]) if raw.get("t_hi") else None,
            t_lo=int(raw.get("t_lo") or raw.get("low_watermark") or 0) or None,
            keep_groups=int(raw.get("keep_groups", 3)),
            record_tokens=int(raw["record_tokens"]) if raw.get("record_tokens") else None,
            user_text_tokens=int(raw["user_text_tokens"]) if raw.get("user_text_tokens") else None,
            render_reasoning=bool(raw.get("render_reasoning", False)),
            recall=_flag(raw.get("recall", False), "recall"),
            chat_template_kwargs=_template_kwargs(raw.get("chat_template_kwargs", {}), raw["tokenizer"]),
            shares=dict(raw.get("shares", {})),
            cache=dict(raw.get("cache", {"model": "vllm_blocks", "block_size": 16})),
            prices=dict(raw.get("prices", {})),
        )
        _ = profile.budget  # validates eq. 1 sizes
        _ = profile.watermarks  # validates eq. 3
        render_cache = profile.tokenizer.get("render_cache", "none")
        if render_cache not in RENDER_CACHES:
            raise ValueError(f"tokenizer.render_cache {render_cache!r} is not one of {', '.join(RENDER_CACHES)}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"profile {name!r} is invalid: {exc}") from exc
    return profile


def load_profiles(override: Path | None = None) -> dict[str, Profile]:
    """The shipped profiles, then those of ``override`` (a TOML file) replacing by name.

    Raises:
        ValueError: a profile misses a required field or breaks eq. 1 (``input_limit <= 0``).
        FileNotFoundError: ``override`` does not exist.
    """
    shipped = resources.files("app.profiles").joinpath("profiles.toml").read_text(encoding="utf-8")
    raw: dict[str, Any] = tomllib.loads(shipped)
    if override is not None:
        raw.update(tomllib.loads(Path(override).read_text(encoding="utf-8")))
    return {name: _parse(name, body) for name, body in raw.items()}


class ProfileRegistry:
    """Profiles by name."""

    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self._profiles = dict(profiles)

    def get(self, name: str) -> Profile:
        """Raises UnknownProfile when ``name`` is not configured."""
        try:
            return self._profiles[name]
        except KeyError:
            raise UnknownProfile(
                f"unknown profile {name!r}; configured profiles: {', '.join(sorted(self._profiles))}",
                profile=name,
                known=sorted(self._profiles),
            ) from None

    def names(self) -> list[str]:
        return sorted(self._profiles)
