"""ctxd-client sets a session's title: ``Session.create(title=...)`` and ``set_title`` (sync
and async), against a real ``ctxd serve``. Before: ``create`` refused the keyword (a
fresh-user trial: every session the client made showed as "untitled" in the inspector)."""

from __future__ import annotations

import asyncio

from ctxd_client import AsyncSession, Session


def test_a_session_created_with_a_title_shows_it_and_set_title_changes_it(ctxd_url: str) -> None:
    session = Session.create(goal="Fix the parser.", title="Parser fix", url=ctxd_url)
    assert session.info()["title"] == "Parser fix"
    assert session.set_title("Parser fix (done)")["title"] == "Parser fix (done)"
    assert session.info()["title"] == "Parser fix (done)"
    assert session.set_title(None)["title"] is None


def test_the_async_session_sets_titles_too(ctxd_url: str) -> None:
    async def run() -> tuple[str | None, str | None]:
        session = await AsyncSession.create(goal="Fix the parser.", title="Async fix", url=ctxd_url)
        first = (await session.info())["title"]
        second = (await session.set_title("Async fix, renamed"))["title"]
        return first, second

    assert asyncio.run(run()) == ("Async fix", "Async fix, renamed")
