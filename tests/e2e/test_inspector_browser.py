"""The inspector in a real browser (issue 15): Debian's headless Chromium, driven by
Playwright's Python package (never ``playwright install``: ``executable_path`` is
/usr/bin/chromium), against ``ctxd serve`` on loopback with API keys required, on a
session replayed from a real trace over HTTP.

Asserts: the key form logs in once and leaves an HttpOnly, SameSite=Strict cookie; every
request the browser makes goes to the loopback server (nothing from another host); the
latest prefix break is visible as text ("first divergence at token N in the <zone> ...
because <reason>"); attacker-controlled event text runs no script. Screenshots go to
``CTXD_SCREENSHOT_DIR`` (``.ci/run`` sets it and prints the paths), else the test's temp
directory; the path is printed either way.

Skipped, with the reason, where /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.services.inspector import divergence_text
from tests.api.test_api import SESSION, assistant, result
from tests.replayed import replay_trace

CHROMIUM = os.environ.get("CTXD_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TRACE = "pydicom__pydicom-901__chat.traj.json"
XSS = "</pre></div></td><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"

pytestmark = pytest.mark.skipif(not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)),
                                reason=f"no Chromium at {CHROMIUM} (Debian package `chromium`; .ci/run installs it)")


def screenshot_dir(tmp_path: Path) -> Path:
    where = Path(os.environ.get("CTXD_SCREENSHOT_DIR") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def test_inspector_in_headless_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package (the test extra) is missing")
    from ctxd_tools.bench_http import serve

    data = tmp_path / "data"
    made = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "inspector"],
                          env=os.environ | {"CTXD_DATA_DIR": str(data), "CTXD_DATABASE_URL": ""},
                          capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("ctxd_")
    auth = {"Authorization": f"Bearer {key}"}
    with serve(data_dir=data, env={"CTXD_AUTH": "required"}, log_path=tmp_path / "serve.log",
               ready_timeout=120) as base, httpx.Client(base_url=base, timeout=120) as http:
        sid, calls = replay_trace(http, TRACE, headers=auth)
        listed = http.get(f"/v1/sessions/{sid}/manifests", params={"limit": 500}, headers=auth).json()["manifests"]
        assert len(listed) == calls == 61
        served = [http.get(f"/v1/sessions/{sid}/manifests/{m['id']}", headers=auth).json() for m in reversed(listed)]
        assert sum(m["compaction"]["pass"] for m in served) >= 1, "a compaction pass ran"
        last_break = [m for m in served if m["cache"].get("first_divergence")][-1]
        why = divergence_text(last_break["cache"]["first_divergence"])
        assert why is not None
        xss = http.post("/v1/sessions", json=SESSION, headers=auth).json()["id"]
        assert http.post(f"/v1/sessions/{xss}/events", headers=auth, json={"events": [
            {"event_id": "u1", "kind": "message", "role": "user", "content": XSS},
            assistant("a1", "c1", content=XSS), result("r1", "c1", XSS)]}).status_code == 200
        assert http.get(f"/v1/sessions/{xss}/request", headers=auth).status_code == 200

        shots = screenshot_dir(tmp_path)
        requests: list[str] = []
        with sync_api.sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1400, "height": 1800}, service_workers="block")
            try:
                page = context.new_page()
                page.set_default_timeout(120_000)  # a shared 2-core machine: a full-page screenshot can take a while
                page.on("request", lambda r: requests.append(r.url))
                dialogs: list[Any] = []
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                # keys required: the page asks for one, once
                page.goto(f"{base}/ui/sessions/{sid}")
                assert page.url.startswith(f"{base}/ui/login?next=")
                page.fill("input[name=key]", key)
                page.click("button[type=submit]")
                page.wait_for_load_state()
                assert page.url == f"{base}/ui/sessions/{sid}", (page.url, page.inner_text("main"))
                cookies = {c["name"]: c for c in context.cookies()}
                cookie = cookies["ctxd_ui"]
                assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
                assert key not in cookie["value"] and page.evaluate("document.cookie") == ""
                # why the latest request broke the prefix: in text on the page
                latest = page.inner_text("#latest")
                assert why in " ".join(latest.split()), latest
                assert page.locator("svg.bar").count() == 61
                page.screenshot(path=str(shots / "inspector.png"))
                page.screenshot(path=str(shots / "inspector-full.png"), full_page=True)
                # a handle link opens the payload
                page.locator("#request a.handle").first.click()
                page.wait_for_load_state()
                assert "/handles/" in page.url and page.locator("pre.payload").count() == 1
                # attacker-controlled text renders as text and runs nothing
                page.goto(f"{base}/ui/sessions/{xss}")
                assert page.title() != "pwned" and not dialogs
                assert page.locator("img").count() == 0 and page.locator("script").count() == 0
                assert XSS in page.inner_text("#timeline")
                page.screenshot(path=str(shots / "inspector-xss.png"))
            finally:
                context.close()
    outside = [u for u in requests if not u.startswith(base + "/")]
    assert requests and not outside, f"requests to other hosts: {outside}"
    assert any(u.endswith("/ui/static/inspector.css") for u in requests)
    print(f"\ninspector screenshots: {shots / 'inspector.png'} {shots / 'inspector-full.png'} "
          f"{shots / 'inspector-xss.png'} ({len(requests)} requests, all to {base})")
    docs = os.environ.get("CTXD_SCREENSHOT_DOCS")
    if docs:  # refresh the README's picture: CTXD_SCREENSHOT_DOCS=docs/inspector.png
        shutil.copyfile(shots / "inspector.png", docs)
