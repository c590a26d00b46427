"""Shared paths and helpers of the deployment tests (compose, Prometheus, Grafana, image)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
RULES = DEPLOY / "prometheus" / "rules" / "ctxd.rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "rules" / "ctxd.rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ctxd.json"
COMPOSE = REPO / "docker-compose.yml"


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, PromQL expr) of every target of every panel of the dashboard."""
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


def require_tool(name: str) -> str:
    """The path of a Debian tool (``.ci/run`` installs them), or skip with the reason."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package: .ci/run installs it)")
    return path
