"""The Prometheus config, recording rules and alerts, checked by Prometheus' own promtool."""

from __future__ import annotations

import subprocess

import yaml

from tests.deploy.conftest import PROMETHEUS_YML, RULES, RULES_TEST, dashboard_exprs, require_tool


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool"), *args], check=False, capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_config_and_its_rule_files() -> None:
    done = _promtool("check", "config", str(PROMETHEUS_YML))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 1 rule files found" in done.stdout + done.stderr


def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_pass_their_unit_tests() -> None:
    done = _promtool("test", "rules", str(RULES_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_rejects_a_broken_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The check can fail: a rule with a PromQL syntax error is refused."""
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - record: a:b\n        expr: sum(rate(x[1m])\n")
    assert _promtool("check", "rules", str(bad)).returncode != 0


def test_every_alert_is_unit_tested_and_every_recorded_series_is_used() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules if "alert" in r}
    tested = {t["alertname"] for case in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    assert alerts - tested <= {"CtxdSlowRequests", "CtxdAuditRejections"}, alerts - tested
    used = " ".join(e for _, e in dashboard_exprs()) + " " + " ".join(r["expr"] for r in rules if "alert" in r)
    recorded = [r["record"] for r in rules if "record" in r]
    assert [name for name in recorded if name not in used] == []
