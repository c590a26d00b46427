"""The inspector pages (issue 15) through the real app (TestClient), on a real replayed
trace: what the page says is what the API's manifests, record and handles say; event text
renders inert; with keys required the page takes a key once and keeps a signed, HttpOnly,
SameSite=Strict cookie; another tenant's session is a 404 as in the API.

The headless-browser test (screenshots, network requests) is tests/e2e/test_inspector_browser.py.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from app.api.routes.ui import COOKIE, COOKIE_SALT, CSP
from app.main import create_app
from app.services import tenancy
from app.services.inspector import divergence_text
from app.settings import Settings
from app.store import repository as repo
from app.store.db import read_only, unit_of_work
from tests.api.test_api import SESSION, assistant, result
from tests.api.test_invalidation_api import bash, write
from tests.replayed import replay_trace

TRACE = "pydicom__pydicom-901__chat.traj.json"
XSS = "</pre></div></td><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">\"'&"


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def parsed(markup: str) -> _Text:
    p = _Text()
    p.feed(markup)
    return p


def text(markup: str) -> str:
    """The page's text as a reader sees it: entities decoded, whitespace collapsed."""
    return " ".join(" ".join(parsed(markup).parts).split())


def section(markup: str, name: str) -> str:
    found = re.search(rf'<section id="{name}"[^>]*>(.*?)</section>', markup, re.DOTALL)
    assert found, f"no section {name}"
    return found.group(1)


@pytest.fixture(scope="module")
def replayed(client: TestClient) -> tuple[TestClient, str, int]:
    """pydicom-901 replayed (61 calls) into the API client (SQLite and PostgreSQL)."""
    sid, calls = replay_trace(client, TRACE)
    return client, sid, calls


def manifests(client: TestClient, sid: str) -> list[dict[str, Any]]:
    """Every manifest of the session through the API, oldest first."""
    out, before = [], None
    while True:
        page = client.get(f"/v1/sessions/{sid}/manifests", params={"limit": 500, **({"before_id": before} if before
                                                                                  else {})}).json()
        out.extend(page["manifests"])
        before = page["next_before_id"]
        if before is None:
            break
    return [client.get(f"/v1/sessions/{sid}/manifests/{m['id']}").json() for m in reversed(out)]


def test_load_manifests_equals_one_by_one(replayed: tuple[TestClient, str, int]) -> None:
    """The page's batch read rebuilds each manifest exactly as GET /manifests/{id} serves it,
    across keyframes (61 manifests, a keyframe every 16), for any subset."""
    client, sid, calls = replayed
    served = manifests(client, sid)
    assert len(served) == calls == 61
    ids = [m["id"] for m in served]
    factory = client.app.state.ctxd.read_factory  # type: ignore[attr-defined]
    with read_only(factory) as db:
        assert repo.load_manifests(db, sid, ids) == {m["id"]: m for m in served}
        newest = ids[-5:]  # the chain of the newest starts at a keyframe before them
        assert repo.load_manifests(db, sid, newest) == {m["id"]: m for m in served[-5:]}
        assert repo.load_manifests(db, sid, [ids[20], 10**9]) == {ids[20]: served[20]}
        assert repo.load_manifests(db, "0" * 32, ids) == {}
        assert repo.count_manifests(db, sid) == 61 and repo.count_manifests(db, sid, before_id=ids[10]) == 10


def test_session_page_explains_the_latest_prefix_break(replayed: tuple[TestClient, str, int]) -> None:
    client, sid, _ = replayed
    served = manifests(client, sid)
    r = client.get(f"/ui/sessions/{sid}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    broke = [m for m in served if m["cache"].get("first_divergence")]
    assert broke, "the replay breaks the prefix at least once (a compaction pass rewrote the trunk)"
    last = broke[-1]
    d = last["cache"]["first_divergence"]
    # e.g. "first divergence at token 1,421 in the trunk because budget: trunk rewritten after evicting ..."
    expected = f"first divergence at token {d['token_offset']:,} in the {d['zone']}"
    assert divergence_text(d).startswith(expected) and d["reason"] in divergence_text(d)
    latest = text(section(page, "latest"))
    assert divergence_text(d) in latest
    assert f"manifest {last['id']}" in latest
    newest = served[-1]
    if newest["cache"].get("first_divergence") is None:
        assert f"Prefix kept: it extends the previous request ({newest['cache']['previous_tokens']:,} tokens)" in latest
        assert f"The last prefix break was call #{served.index(last) + 1}" in latest
    # the calls: one bar per call, with the profile's marks (qwen3: input_limit 28,160, T_hi 8,448, T_lo 5,632)
    calls = section(page, "calls")
    assert calls.count('<svg class="bar"') == len(served) == 61
    assert calls.count("<title>input_limit 28,160 tokens</title>") == 61
    assert calls.count("<title>T_hi 8,448 tokens</title>") == calls.count("<title>T_lo 5,632 tokens</title>") == 61
    passes = sum(m["compaction"]["pass"] for m in served)
    assert passes >= 1 and calls.count('class="tag pass"') == passes
    for m in served:
        for role, tokens in m["tokens"]["by_role"].items():
            if tokens:
                assert f"<title>{role}: {tokens:,} tokens</title>" in calls
    # the selected request (the newest): its zones' tokens as the manifest counts them
    request = text(section(page, "request"))
    for zone, tokens in newest["tokens"]["by_zone"].items():
        assert f"{zone} {tokens:,} tokens" in request
    assert f"Request of call #61 (manifest {newest['id']})" in request


def test_record_and_invalidation_match_the_api(replayed: tuple[TestClient, str, int]) -> None:
    client, sid, _ = replayed
    page = client.get(f"/ui/sessions/{sid}").text
    record = client.get(f"/v1/sessions/{sid}/record").json()
    assert record["passes"] >= 1
    shown = re.search(r'<pre class="record">(.*?)</pre>', section(page, "record"), re.DOTALL).group(1)
    assert html.unescape(shown) == record["text"]
    rec = record["record"]
    assert f"compaction passes so far: {record['passes']} · folded up to seq {rec['fold_seq']} · {rec['tokens']:,} tokens" in text(page)
    # every write the replay posted is a change of the graph, in order (path@rN, N counting the writes)
    graph = section(page, "invalidation")
    rows = re.findall(r"<tr><td><code>([^<]+)</code></td><td>(\w+)</td><td class=\"num\">(\d+)</td>", graph)
    writes = [(e["artifact"], e["seq"]) for e in posted_events(client, sid) if e["kind"] == "artifact_write"]
    assert len(writes) == 15
    revision: dict[str, int] = {}
    expected = []
    for artifact, seq in writes:
        revision[artifact] = revision.get(artifact, 0) + 1
        expected.append((html.escape(f"{artifact}@r{revision[artifact]}"), "write", str(seq)))
    assert [r for r in rows if r[1] == "write"] == expected
    states = re.search(r"Observations by state: ([^<]*)</p>", graph).group(1)
    counts = {k: int(n) for k, n in re.findall(r"(\w+) (\d+)", states)}
    assert sum(counts.values()) == sum(e["kind"] == "tool_result" for e in posted_events(client, sid))
    assert counts["historical"] >= 1  # pydicom/config.py@r1 withdrew the reads of r0


def posted_events(client: TestClient, sid: str) -> list[dict[str, Any]]:
    """The session's events as stored (kind, seq, artifact), read from the database."""
    from sqlalchemy import select

    from app.store.tables import EventRow

    with read_only(client.app.state.ctxd.read_factory) as db:  # type: ignore[attr-defined]
        rows = db.execute(select(EventRow.seq, EventRow.kind, EventRow.body).where(EventRow.session_id == sid)
                          .order_by(EventRow.seq)).all()
    return [{"seq": r.seq, "kind": r.kind, "artifact": r.body.get("artifact")} for r in rows]


def test_invalidation_example_tombstone_break(client: TestClient) -> None:
    """Issue 11's example (read config.yaml, write it, read again) seen on the page: the
    r0 read is historical with its handle, the graph row config.yaml@r1 withdraws it, and
    the latest request's prefix break is explained as the tombstone that replaced it."""
    sid = client.post("/v1/sessions", json=SESSION).json()["id"]
    assert client.post(f"/v1/sessions/{sid}/events", json={"events": [
        bash("a1", "c1", "cat config.yaml"),
        result("t1", "c1", "timeout: 30\n", binding={"artifact": "config.yaml", "kind": "file"})]}).status_code == 200
    assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
    assert client.post(f"/v1/sessions/{sid}/events", json={"events": [
        bash("a2", "c2", "sed -i 's/30/60/' config.yaml"), write("w1", "config.yaml"), result("t2", "c2", ""),
        bash("a3", "c3", "cat config.yaml"),
        result("t3", "c3", "timeout: 60\n", binding={"artifact": "config.yaml", "kind": "file"})]}).status_code == 200
    manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    d = manifest["cache"]["first_divergence"]
    assert (d["zone"], d["seq"]) == ("leaf", 2) and d["reason"].startswith("invalidation: a historical observation "
                                                                            "replaced in place by a tombstone")
    page = client.get(f"/ui/sessions/{sid}").text
    assert f"Prefix break: first divergence at token {d['token_offset']:,} in the leaf (event seq 2) because " \
           f"{d['reason']}." in text(section(page, "latest"))
    handle = hashlib.sha256(b"timeout: 30\n").hexdigest()
    historical = re.search(r'<h3 id="historical">(.*?)</table>', page, re.DOTALL).group(1)
    assert "Historical observations (1)" in text(historical) and f"/ui/sessions/{sid}/handles/{handle}" in historical
    assert "tombstone" in text(historical) and "superseded by config.yaml@r1" in text(historical)
    graph = text(section(page, "invalidation"))
    assert f"config.yaml@r1 write 4 seq 2 {handle[:12]} read config.yaml@r0" in graph
    assert "current 1 · historical 1 · unbound 1" in graph


def test_handle_links_read_the_payloads(replayed: tuple[TestClient, str, int]) -> None:
    client, sid, _ = replayed
    page = client.get(f"/ui/sessions/{sid}").text
    links = sorted(set(re.findall(rf'href="(/ui/sessions/{sid}/handles/[0-9a-f]{{64}})"', page)))
    assert len(links) > 50
    for link in links[:: max(1, len(links) // 8)]:
        h = link.rsplit("/", 1)[1]
        raw = client.get(f"/v1/sessions/{sid}/handles/{h}").content
        got = client.get(link)
        assert got.status_code == 200
        shown = re.search(r'<pre class="payload">(.*?)</pre>', got.text, re.DOTALL).group(1)
        assert html.unescape(shown) == raw.decode("utf-8")
    assert client.get(f"/ui/sessions/{sid}/handles/{'0' * 64}").status_code == 404


def test_manifest_selection_and_unknown_ones(replayed: tuple[TestClient, str, int]) -> None:
    client, sid, _ = replayed
    served = manifests(client, sid)
    chosen = next(m for m in served if m["compaction"]["pass"])
    page = client.get(f"/ui/sessions/{sid}", params={"manifest": chosen["id"]}).text
    request = text(section(page, "request"))
    assert f"(manifest {chosen['id']})" in request
    assert f"Prefix break: {divergence_text(chosen['cache']['first_divergence'])}" in request
    other = replay_other = client.post("/v1/sessions", json=SESSION).json()["id"]
    assert replay_other
    absent = client.get(f"/ui/sessions/{other}", params={"manifest": chosen["id"]})
    assert absent.status_code == 404 and f"no manifest {chosen['id']}" in text(absent.text)
    assert client.get(f"/ui/sessions/{'0' * 32}").status_code == 404
    assert client.get(f"/ui/sessions/{sid}", params={"manifest": "x"}).status_code == 422


def test_event_text_renders_inert(client: TestClient) -> None:
    """Attacker-controlled text (contract, messages, tool calls, outputs, steps, notes) is
    escaped everywhere the page shows it; the page allows no script at all (CSP)."""
    body = SESSION | {"contract": {"goal": XSS, "contract_version": 1,
                                   "constraints": [{"id": "c1", "text": XSS}]}}
    sid = client.post("/v1/sessions", json=body).json()["id"]
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
        {"event_id": "u1", "kind": "message", "role": "user", "content": XSS},
        assistant("a1", "c1", content=XSS), result("r1", "c1", XSS),
        {"event_id": "s1", "kind": "step", "text": XSS}]})
    assert r.status_code == 200, r.text
    assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
    handle = hashlib.sha256(XSS.encode()).hexdigest()
    for url in (f"/ui/sessions/{sid}", f"/ui/sessions/{sid}/handles/{handle}", "/ui"):
        got = client.get(url)
        assert got.status_code == 200
        assert got.headers["content-security-policy"] == CSP and "script-src" not in CSP  # default-src 'none'
        assert got.headers["x-content-type-options"] == "nosniff" and got.headers["cache-control"] == "no-store"
        page = got.text
        assert "<script" not in page.lower() and "<img" not in page.lower() and "onerror=\"" not in page
        tags = parsed(page).tags
        assert not [t for t, a in tags if t in ("script", "img", "iframe", "object")]
        assert not [a for _, a in tags if any(k.startswith("on") for k in a)]
        if "handles" not in url and url != "/ui":
            assert text(page).count(XSS) >= 5  # shown, as text: contract, constraint, user, assistant, step, output
    assert XSS in text(client.get(f"/ui/sessions/{sid}/handles/{handle}").text)


def test_page_loads_only_its_own_stylesheet(client: TestClient) -> None:
    sid = client.post("/v1/sessions", json=SESSION).json()["id"]
    for url in ("/ui", f"/ui/sessions/{sid}"):
        page = client.get(url).text
        refs = [v for _, a in parsed(page).tags for k, v in a.items() if k in ("href", "src", "action") and v]
        assert refs and all(v.startswith(("/", "?", "#")) and not v.startswith("//") for v in refs), refs
        assert [v for v in refs if v.endswith(".css")] == ["/ui/static/inspector.css"]
    css = client.get("/ui/static/inspector.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "url(" not in css.text and "@import" not in css.text


def test_without_keys_required_nothing_is_asked(client: TestClient) -> None:
    """auth auto on an in-process client (as on loopback): no login, the default tenant."""
    r = client.get("/ui/login", params={"next": "/ui"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    assert client.get("/ui").status_code == 200 and COOKIE not in client.cookies


# --- keys required ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("ctxd-ui-auth"), auth="required", ui_secret="s3cret-for-tests")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def make_key(client: TestClient, tenant: str) -> str:
    with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        return tenancy.create_key(db, tenant)[1]


def login(client: TestClient, key: str, next_: str = "/ui", **headers: str) -> Any:
    return client.post("/ui/login", content=f"key={key}&next={next_}", follow_redirects=False,
                       headers={"content-type": "application/x-www-form-urlencoded", **headers})


def test_keys_required_login_once_then_cookie(keyed: TestClient) -> None:
    client = keyed
    client.cookies.clear()
    key_a, key_b = make_key(client, "ui-a"), make_key(client, "ui-b")
    mine = client.post("/v1/sessions", json=SESSION, headers={"Authorization": f"Bearer {key_a}"}).json()["id"]
    theirs = client.post("/v1/sessions", json=SESSION, headers={"Authorization": f"Bearer {key_b}"}).json()["id"]
    r = client.get(f"/ui/sessions/{mine}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/ui/login?next=%2Fui%2Fsessions%2F{mine}"
    form = client.get(r.headers["location"])
    assert form.status_code == 200 and 'type="password" name="key"' in form.text
    assert f'value="/ui/sessions/{mine}"' in form.text
    bad = login(client, key_a[:-1] + ("0" if key_a[-1] != "0" else "1"))
    assert bad.status_code == 401 and "set-cookie" not in bad.headers and "not valid" in text(bad.text)
    ok = login(client, key_a, f"/ui/sessions/{mine}")
    assert ok.status_code == 303 and ok.headers["location"] == f"/ui/sessions/{mine}"
    cookie = ok.headers["set-cookie"]
    attrs = {a.strip().split("=", 1)[0].lower(): a.strip() for a in cookie.split(";")[1:]}
    assert cookie.startswith(f"{COOKIE}=") and key_a not in cookie and key_a.split("_")[2] not in cookie
    assert "httponly" in attrs and attrs["samesite"].lower() == "samesite=strict" and attrs["path"] == "Path=/ui"
    assert attrs["max-age"] == "Max-Age=900" and "secure" not in attrs  # plain HTTP here; Secure over HTTPS
    listing = client.get("/ui")
    assert listing.status_code == 200 and mine in listing.text and theirs not in listing.text
    assert client.get(f"/ui/sessions/{mine}").status_code == 200
    # another tenant's session: the 404 page of an absent one, word for word (ids aside)
    other, absent = client.get(f"/ui/sessions/{theirs}"), client.get(f"/ui/sessions/{'0' * 32}")
    assert other.status_code == absent.status_code == 404
    assert text(other.text).replace(theirs, "ID") == text(absent.text).replace("0" * 32, "ID")
    # the cookie is for the pages only: the API still wants the key
    assert client.get("/v1/sessions").status_code == 401
    # logout ends it
    out = client.post("/ui/logout", follow_redirects=False)
    assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/ui", follow_redirects=False).status_code == 303


def test_cookie_expired_tampered_or_revoked(keyed: TestClient) -> None:
    client = keyed
    client.cookies.clear()
    key = make_key(client, "ui-c")
    assert login(client, key).status_code == 303
    token = client.cookies[COOKIE]
    assert client.get("/ui", follow_redirects=False).status_code == 200

    class Old(TimestampSigner):
        def get_timestamp(self) -> int:
            return super().get_timestamp() - 901

    old = URLSafeTimedSerializer("s3cret-for-tests", salt=COOKIE_SALT, signer=Old).dumps(
        {"k": tenancy.key_id_of(key), "t": client.app.state.ctxd.ui_signer.loads(token)["t"],  # type: ignore[attr-defined]
         "n": client.app.state.ctxd.ui_signer.loads(token)["n"]})  # type: ignore[attr-defined]
    for value in (old, token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
                  URLSafeTimedSerializer("another-secret", salt=COOKIE_SALT).dumps({"k": "x", "t": "default"})):
        client.cookies.clear()
        client.cookies.set(COOKIE, value, path="/ui")
        r = client.get("/ui", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    client.cookies.clear()
    client.cookies.set(COOKIE, token, path="/ui")
    assert client.get("/ui", follow_redirects=False).status_code == 200
    with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        assert tenancy.revoke_key(db, key)
    assert client.get("/ui", follow_redirects=False).status_code == 303  # revoked: the cookie ends at once
    client.cookies.clear()


def test_logout_ends_the_session_on_the_server_for_every_worker(keyed: TestClient) -> None:
    """OWASP ASVS 3.3.1: logout invalidates the session token. Before: logout only asked the
    browser to delete the cookie, and a copy of it (another tab, a proxy log, a stolen
    cookie) stayed valid for CTXD_UI_SESSION_SECONDS (15 min). Now the cookie's session
    nonce is ended on the server, for every worker on the database; a new login works."""
    client = keyed
    client.cookies.clear()
    key = make_key(client, "ui-e")
    assert login(client, key).status_code == 303
    token = client.cookies[COOKIE]
    with TestClient(create_app(client.app.state.ctxd.settings)) as other:  # type: ignore[attr-defined]  # another worker
        other.cookies.set(COOKIE, token, path="/ui")
        assert other.get("/ui", follow_redirects=False).status_code == 200
        assert client.post("/ui/logout", follow_redirects=False).status_code == 303
        client.cookies.clear()
        client.cookies.set(COOKIE, token, path="/ui")  # the copy
        for worker in (client, other):
            r = worker.get("/ui", follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
        assert other.post("/ui/logout", follow_redirects=False).status_code == 303  # twice: a no-op
    client.cookies.clear()
    assert login(client, key).status_code == 303
    assert client.cookies[COOKIE] != token and client.get("/ui", follow_redirects=False).status_code == 200
    client.cookies.clear()


def test_login_refuses_other_origins_and_open_redirects(keyed: TestClient) -> None:
    client = keyed
    client.cookies.clear()
    key = make_key(client, "ui-d")
    cross = login(client, key, origin="http://evil.example")
    assert cross.status_code == 403 and "set-cookie" not in cross.headers
    assert login(client, key, origin="null").status_code == 403
    assert login(client, key, **{"sec-fetch-site": "cross-site"}).status_code == 403
    same = login(client, key, "//evil.example/ui", origin="http://testserver")
    assert same.status_code == 303 and same.headers["location"] == "/ui"
    assert login(client, key, "https://evil.example/").headers["location"] == "/ui"
    client.cookies.clear()


def test_templates_and_stylesheet_are_packaged() -> None:
    """The wheel carries the templates and the stylesheet (package data)."""
    import app

    root = Path(app.__file__).parent / "api"
    assert {p.name for p in (root / "templates").glob("*.html")} >= {"base.html", "session.html", "sessions.html",
                                                                    "login.html", "handle.html", "error.html"}
    assert (root / "static" / "inspector.css").is_file()
    text = (Path(app.__file__).parent.parent / "pyproject.toml").read_text()
    assert '"api/templates/*.html", "api/static/*"' in text


# --------------------------------------------------------------------------- issue 16 item 4

def test_plans_children_and_documents_are_shown(client: TestClient) -> None:
    """Two plan versions, a replaced document and a child with a conclusion: the page shows
    exactly those values (escaped), the timeline names each kind, the child links back."""
    parent = client.post("/v1/sessions", json=SESSION).json()["id"]
    evs = [{"event_id": "u", "kind": "message", "role": "user", "content": "Fix the parser."},
           {"event_id": "p1", "kind": "plan", "text": "1. reproduce"},
           {"event_id": "d1", "kind": "document", "key": "api", "source": "https://docs.example/v1", "text": "old"},
           {"event_id": "p2", "kind": "plan", "text": "1. reproduce (done) " + XSS},
           {"event_id": "d2", "kind": "document", "key": "api", "source": XSS, "text": "new"}]
    assert client.post(f"/v1/sessions/{parent}/events", json={"events": evs}).status_code == 200
    child = client.post(f"/v1/sessions/{parent}/children", json={"goal": "Find call sites."}).json()["id"]
    r = client.post(f"/v1/sessions/{child}/events",
                    json={"events": [{"event_id": "c", "kind": "conclusion", "text": "2 call sites " + XSS}]})
    assert r.status_code == 200, r.text
    page = client.get(f"/ui/sessions/{parent}")
    assert page.status_code == 200
    assert "<script>document.title" not in page.text and "<img src=x" not in page.text
    sp = section(page.text, "scratchpad")
    shown = text(sp)
    assert "Plan version 2 (seq 4)" in shown and "not yet in the progress record" in shown
    assert "1. reproduce (done) " + XSS in shown and "earlier versions: version 1 seq 2" in shown
    assert "Child sessions (1)" in shown, shown
    assert f"{child} : conclusion at seq 6" in shown, shown[shown.find("Child"):shown.find("Documents")]
    assert "2 call sites " + XSS in shown
    assert "Documents (2)" in shown
    rows = re.findall(r'<tr class="document">(.*?)</tr>', sp, re.DOTALL)
    assert len(rows) == 2 and text(rows[0]).startswith("api https://docs.example/v1 3 replaced by seq 5")
    assert text(rows[1]).startswith(f"api {XSS} 5 current")
    assert f'href="/ui/sessions/{child}"' in sp
    timeline_ = text(section(page.text, "timeline"))
    for label in ("plan version 1", "plan version 2", "document [api] from https://docs.example/v1",
                  f"conclusion of child {child} (its seq 1)"):
        assert label in timeline_
    child_page = client.get(f"/ui/sessions/{child}")
    assert child_page.status_code == 200
    csp = section(child_page.text, "scratchpad")
    assert f'child of <a href="/ui/sessions/{parent}">' in csp and "No plan." in text(csp)
    assert "conclusion (parent seq 6)" in text(section(child_page.text, "timeline"))


def test_other_tenants_child_is_not_shown(keyed: TestClient) -> None:
    client = keyed
    client.cookies.clear()
    key_a, key_b = make_key(client, "ui16-a"), make_key(client, "ui16-b")
    auth_a = {"Authorization": f"Bearer {key_a}"}
    parent = client.post("/v1/sessions", json=SESSION, headers=auth_a).json()["id"]
    child = client.post(f"/v1/sessions/{parent}/children", json={"goal": "g"}, headers=auth_a).json()["id"]
    assert login(client, key_b).status_code == 303
    assert client.get(f"/ui/sessions/{child}").status_code == 404
    assert client.get(f"/ui/sessions/{parent}").status_code == 404
    assert child not in client.get("/ui").text
    client.cookies.clear()
    assert login(client, key_a).status_code == 303
    assert f'href="/ui/sessions/{child}"' in client.get(f"/ui/sessions/{parent}").text
    client.cookies.clear()


def test_a_nul_in_an_event_text_is_shown_as_the_replacement_character(client: TestClient) -> None:
    """Event texts may hold a NUL (accepted, stored, served); HTML has none, so a page that
    carried it raw was a parse error and grep took it for binary (found by a fresh-user
    check). The page shows U+FFFD instead."""
    sid = client.post("/v1/sessions", json=SESSION).json()["id"]
    assert client.post(f"/v1/sessions/{sid}/events",
                       json={"events": [{"kind": "step", "event_id": "s1", "text": "a\u0000b"}]}).status_code == 200
    page = client.get(f"/ui/sessions/{sid}")
    assert page.status_code == 200 and "\x00" not in page.text and "a\ufffdb" in page.text
