"""The servers .ci/run starts are reachable, and the shared fixtures work on them."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest


@pytest.mark.postgres
def test_postgres_select_1() -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(os.environ["CTXD_TEST_POSTGRES_URL"])
    try:
        with engine.connect() as conn:
            assert conn.execute(text("select 1")).scalar_one() == 1
            assert engine.dialect.driver == "psycopg"
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_url_fixture_is_a_database_of_its_own(postgres_url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            name = conn.execute(text("select current_database()")).scalar_one()
    finally:
        engine.dispose()
    assert name != "ctxd_test" and name.startswith("ctxd_t_")


@pytest.mark.postgres
def test_postgres_database_factory_gives_an_empty_database(
    postgres_database_factory: Callable[[], str],
) -> None:
    from sqlalchemy import create_engine, text

    url = postgres_database_factory()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            tables = conn.execute(
                text("select count(*) from information_schema.tables where table_schema = 'public'")
            ).scalar_one()
            assert tables == 0
            conn.execute(text("create table smoke (id integer primary key)"))
    finally:
        engine.dispose()


@pytest.mark.redis
def test_redis_ping() -> None:
    import redis

    client = redis.Redis.from_url(os.environ["CTXD_TEST_REDIS_URL"])
    try:
        assert client.ping() is True
    finally:
        client.close()


@pytest.mark.redis
def test_clean_redis_fixture_flushes(clean_redis: str) -> None:
    import redis

    client = redis.Redis.from_url(clean_redis)
    try:
        assert client.dbsize() == 0
        client.set("ctxd:smoke", b"\x00\xff")
        assert client.get("ctxd:smoke") == b"\x00\xff"
    finally:
        client.close()
