"""docker-compose.yml (issue 13 item 3): Debian's docker-compose validates it, and the
wiring between services, Prometheus and Grafana files is consistent.

Docker cannot run here, so what can be checked without an engine is: the Compose tool's
own validation (``docker-compose config``; Compose v1 1.29, whose schema is stricter than
v2's on top-level keys), and by reading the file: the migration job gates ctxd, ctxd runs
N workers with limits and a /readyz healthcheck, Prometheus and Grafana mount the repo's
files at the paths their configs name."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import COMPOSE, DASHBOARD, DEPLOY, PROMETHEUS_YML, REPO, require_tool


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


def _config(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("docker-compose"), "-f", str(path), "config"], check=False,
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=os.environ | env)


def test_docker_compose_validates_the_file_and_interpolates_the_worker_count() -> None:
    done = subprocess.run([require_tool("docker-compose"), "-f", str(COMPOSE), "config", "-q"], check=False,
                          capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    for workers, want in (({}, "2"), ({"CTXD_WORKERS": "4"}, "4")):
        resolved = _config(COMPOSE, **workers)
        assert resolved.returncode == 0, resolved.stderr
        command = yaml.safe_load(resolved.stdout)["services"]["ctxd"]["command"]
        assert command[command.index("--workers") + 1] == want


def test_docker_compose_rejects_an_invalid_dependency_condition(tmp_path: Path) -> None:
    """The validation can fail: a misspelt depends_on condition is refused."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("condition: service_completed_successfully",
                                                  "condition: service_completed", 1))
    assert _config(broken).returncode != 0


def test_migrate_job_gates_the_service_and_the_key_job(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "keys", "ctxd", "prometheus", "grafana"}
    assert "name" not in compose  # Compose v1 refuses a top-level name
    assert services["migrate"]["command"] == ["ctxd", "migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for gated in ("ctxd", "keys"):
        assert services[gated]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    # one database for all three ctxd containers
    urls = {services[s]["environment"]["CTXD_DATABASE_URL"] for s in ("migrate", "keys", "ctxd")}
    assert len(urls) == 1 and "@postgres:5432/" in urls.pop()


def test_ctxd_runs_workers_with_limits_and_a_readiness_healthcheck(compose: dict[str, Any]) -> None:
    ctxd = compose["services"]["ctxd"]
    assert ctxd["command"][:2] == ["ctxd", "serve"] and "${CTXD_WORKERS:-2}" in ctxd["command"]
    assert ctxd["command"][ctxd["command"].index("--host") + 1] == "0.0.0.0"
    limits = ctxd["deploy"]["resources"]["limits"]
    assert float(limits["cpus"]) > 0 and limits["memory"]
    assert any("/readyz" in part for part in ctxd["healthcheck"]["test"])
    assert ctxd["environment"]["CTXD_REDIS_URL"].startswith("redis://redis:")
    assert ctxd["environment"]["CTXD_AUTO_MIGRATE"] == "false"  # the migrate job migrates; ctxd checks


def test_prometheus_and_grafana_mount_the_repo_files_at_the_configured_paths(compose: dict[str, Any]) -> None:
    services = compose["services"]
    prom = services["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prom["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    scrape = yaml.safe_load(PROMETHEUS_YML.read_text())
    ctxd_job = next(j for j in scrape["scrape_configs"] if j["job_name"] == "ctxd")
    port = services["ctxd"]["command"][services["ctxd"]["command"].index("--port") + 1]
    assert ctxd_job["static_configs"][0]["targets"] == [f"ctxd:{port}"]
    for rule_file in scrape["rule_files"]:
        assert (PROMETHEUS_YML.parent / rule_file).is_file()  # relative: the same in the container

    grafana = services["grafana"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"] if v.startswith("./")}
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/ctxd.yml").read_text())["providers"][0]
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    datasource = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    dash = json.loads(DASHBOARD.read_text())
    assert {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]} == {uid}


def test_the_dashboard_has_the_panels_of_the_issue() -> None:
    titles = [p["title"].lower() for p in json.loads(DASHBOARD.read_text())["panels"]]
    for wanted in ("segment-cache hit ratio", "predicted prefix reuse", "budget occupancy by role", "p50 / p95",
                   "error rate", "compaction passes and audit rejections", "redis fallbacks", "events ingested"):
        assert any(wanted in t for t in titles), wanted
