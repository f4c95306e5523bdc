"""Prometheus scrape configs (one aggregator; several shards remote-writing to VictoriaMetrics),
rules and rule tests: promtool (and VictoriaMetrics' vmalert) accept them, names are exported."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploycheck import (
    DEPLOY,
    NAMES,
    commscope_names,
    misused_counters,
    recorded_names,
    require_tool,
    unknown_labels,
)

PROM = DEPLOY / "prometheus"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def rules() -> list[dict[str, Any]]:
    return [rule for group in load(PROM / "rules.yml")["groups"] for rule in group["rules"]]


def alerts() -> list[str]:
    return [r["alert"] for r in rules() if "alert" in r]


def records() -> list[str]:
    return [r["record"] for r in rules() if "record" in r]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=DEPLOY.parent,
    )


def test_promtool_checks_the_config_and_the_rule_files_it_names() -> None:
    done = promtool("check", "config", "deploy/prometheus/prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", "deploy/prometheus/rules.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_rule_tests_pass() -> None:
    done = promtool("test", "rules", "deploy/prometheus/rules_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_checks_the_sharded_config() -> None:
    done = promtool("check", "config", "deploy/prometheus/prometheus-shards.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout


def test_sharded_config_keeps_labels_and_sends_commscope_series_on() -> None:
    config = load(PROM / "prometheus-shards.yml")
    assert config["rule_files"] == ["rules.yml"]
    (scrape,) = config["scrape_configs"]
    assert scrape["honor_labels"] is True  # the aggregators' job and shard labels win
    (remote,) = config["remote_write"]
    assert remote["url"] == "http://victoriametrics:8428/api/v1/write"
    (keep,) = remote["write_relabel_configs"]
    assert (keep["source_labels"], keep["action"]) == (["__name__"], "keep")
    kept = re.compile(keep["regex"])  # Prometheus anchors it: fullmatch
    assert all(kept.fullmatch(name) for name in NAMES | set(records()))
    assert not any(kept.fullmatch(n) for n in ("up", "go_goroutines", "commscope", "a:b:c"))


def test_vmalert_accepts_the_rules() -> None:
    """Where several Prometheus servers each see part of a job, rules.yml runs in vmalert."""
    done = subprocess.run(
        [require_tool("vmalert"), "-dryRun", "-rule=deploy/prometheus/rules.yml"],
        capture_output=True, text=True, timeout=60, check=False, cwd=DEPLOY.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_scrape_config_keeps_commscopes_job_label() -> None:
    config = load(PROM / "prometheus.yml")
    assert config["rule_files"] == ["rules.yml"]
    (scrape,) = config["scrape_configs"]
    assert scrape["honor_labels"] is True
    assert scrape["scrape_interval"] == "15s"
    assert scrape["static_configs"] == [{"targets": ["127.0.0.1:9464"]}]


def test_scrape_config_reads_the_target_files_the_slurm_prolog_writes() -> None:
    (scrape,) = load(PROM / "prometheus.yml")["scrape_configs"]
    (sd,) = scrape["file_sd_configs"]
    prolog = (DEPLOY / "slurm" / "prolog.sh").read_text(encoding="utf-8")
    default = re.search(r"COMMSCOPE_FILE_SD_DIR:=([^}]+)\}", prolog)
    assert default is not None and sd["files"] == [f"{default.group(1)}/*.json"]


# The one rule on a series commscope does not export: Prometheus' own `up` of the scrape job.
UP_RULE = "CommscopeAggregatorDown"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.get("alert") or r["record"])
def test_rule_names_only_exported_or_recorded_series(rule: dict[str, Any]) -> None:
    expr = rule["expr"]
    names, recorded = commscope_names(expr), recorded_names(expr)
    assert names or recorded or rule.get("alert") == UP_RULE, expr
    assert names <= NAMES, f"not exported: {sorted(names - NAMES)}"
    assert recorded <= set(records()), f"never recorded: {sorted(recorded - set(records()))}"
    assert not misused_counters(expr), expr
    assert not unknown_labels(expr), expr


def test_recorded_names_follow_level_metric_operations() -> None:
    for name in records():
        level, metric, operations = name.split(":")
        assert metric.startswith("commscope_") and level and operations, name


def rule_tests() -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = load(PROM / "rules_test.yml")["tests"]
    return tests


@pytest.mark.parametrize("alert", alerts())
def test_every_alert_is_tested_firing_and_quiet(alert: str) -> None:
    cases = [
        c for t in rule_tests() for c in t.get("alert_rule_test", []) if c["alertname"] == alert
    ]
    assert any(c["exp_alerts"] for c in cases), "never seen firing"
    assert any(not c["exp_alerts"] for c in cases), "never seen quiet"


@pytest.mark.parametrize("record", records())
def test_every_recording_rule_is_tested(record: str) -> None:
    tested = {c["expr"] for t in rule_tests() for c in t.get("promql_expr_test", [])}
    assert record in tested


def test_rule_tests_feed_only_exported_series() -> None:
    for test in rule_tests():
        for series in test["input_series"]:
            assert commscope_names(series["series"]) <= NAMES, series["series"]


def readme_anchors() -> set[str]:
    """The anchors of deploy/README.md's headings, as Markdown renderers make them: lower
    case, punctuation but `-` and `_` dropped, spaces turned into `-`."""
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("alert", alerts())
def test_every_alert_links_its_runbook_section_in_the_repository(alert: str) -> None:
    (rule,) = [r for r in rules() if r.get("alert") == alert]
    url = rule["annotations"]["runbook_url"]
    path, _, anchor = url.partition("#")
    assert (DEPLOY.parent / path).is_file() and path == "deploy/README.md", url
    assert anchor == alert.lower() and anchor in readme_anchors(), url


def test_the_aggregator_down_alert_watches_every_scrape_job_of_the_deploy_files() -> None:
    """`up{job=~"commscope-aggregator.*"}`: the scrape jobs of both configs (the Slurm prolog's
    file_sd targets are read by prometheus.yml's) and the Kubernetes ServiceMonitor's (its job
    label is the Service's name)."""
    (rule,) = [r for r in rules() if r.get("alert") == UP_RULE]
    pattern = re.search(r'up\{job=~"([^"]+)"\}', rule["expr"])
    assert pattern is not None and rule["expr"].strip().endswith("== 0")
    jobs = [
        scrape["job_name"]
        for config in ("prometheus.yml", "prometheus-shards.yml")
        for scrape in load(PROM / config)["scrape_configs"]
    ]
    base = (DEPLOY / "kubernetes" / "base" / "aggregator.yaml").read_text(encoding="utf-8")
    # the overlays suffix the Service's name with the job's: the prefix is the base's name
    services = [d["metadata"]["name"] for d in yaml.safe_load_all(base) if d["kind"] == "Service"]
    assert jobs and all(re.fullmatch(pattern.group(1), job) for job in jobs)
    assert services == ["commscope-aggregator"] and re.fullmatch(pattern.group(1), services[0])
