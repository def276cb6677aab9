"""``python app.py --workers N``'s parts that need no server: its command line refuses what
cannot work in words, says what to install when HAProxy or Redis is missing, shares the cores
out, and writes an HAProxy configuration that HAProxy accepts; ``deploy/haproxy.cfg`` is the
same configuration for several hosts. (The launcher itself: ``tests/system/test_cluster.py``.)"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import app as visualiser
from ui.serving import cluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--workers", "0"], "--workers must be 1 or more"),
        (["--no-balancer"], "give the group's Redis with --redis"),
        (["--redis", "redis://127.0.0.1:6379/0"], "--redis goes with --workers N"),
        (["--workers", "2", "--share"], "--share makes a link to one process"),
        (["--workers", "2", "--redis", "127.0.0.1:6379"], "--redis takes a URL"),
    ],
)
def test_impossible_combinations_are_refused_in_words(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], main_launches: dict[str, Any]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        visualiser.main(argv)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert said in error and "Traceback" not in error
    assert not main_launches  # nothing was served


def test_one_worker_is_the_plain_process(main_launches: dict[str, Any]) -> None:
    visualiser.main(["--workers", "1"])
    assert main_launches["blocked"]
    middleware = main_launches["app_kwargs"]["middleware"]
    assert cluster.WorkerIdentity not in [m.cls for m in middleware]


def test_missing_programs_are_named_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, path=None: None)
    args = argparse.Namespace(redis=None, no_balancer=False)
    assert cluster.serve(args) == 2
    said = capsys.readouterr().err
    assert "haproxy and redis-server" in said
    assert "apt-get install haproxy redis-server" in said
    # Given a Redis and no balancer, neither program is needed.
    assert cluster.missing_programs(need_redis=False, need_haproxy=False) == ""


@pytest.mark.parametrize(
    ("workers", "cores", "threads"), [(1, 16, 16), (2, 16, 8), (3, 16, 5), (4, 2, 1), (8, 2, 1)]
)
def test_workers_share_the_cores_without_oversubscribing(
    workers: int, cores: int, threads: int
) -> None:
    assert cluster.threads_per_worker(workers, cores) == threads
    assert workers * threads <= max(cores, workers)


def _directives(config: str) -> list[str]:
    """The configuration without comments or blank lines, one directive a line."""
    lines = (line.split("#", 1)[0].strip() for line in config.splitlines())
    return [line for line in lines if line]


def test_the_configuration_pins_by_cookie_checks_health_and_redispatches() -> None:
    config = cluster.haproxy_config("0.0.0.0:7860", [("w1", "127.0.0.1:40001")])
    directives = _directives(config)
    assert "bind 0.0.0.0:7860" in directives
    assert "cookie VISUALISER_WORKER insert indirect nocache httponly" in directives
    assert not any(d.startswith("balance source") for d in directives)  # never by client IP
    assert "option httpchk GET /visualiser-worker" in directives
    # A dead worker's requests go to another on the last retry, never a live one's on the first.
    assert "option redispatch -1" in directives and "retries 2" in directives
    assert "http-reuse never" in directives
    assert "server w1 127.0.0.1:40001 cookie w1" in directives
    # Server-sent events stay open between events for as long as a page is open.
    for timeout in ("client", "server", "tunnel"):
        assert f"timeout {timeout} 1h" in directives


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_the_launchers_and_the_deployments_configuration(tmp_path: Path) -> None:
    written = tmp_path / "haproxy.cfg"
    servers = [("w1", "127.0.0.1:40001"), ("w2", "127.0.0.1:40002")]
    written.write_text(cluster.haproxy_config("127.0.0.1:7860", servers))
    for config in (written, DEPLOY):
        checked = subprocess.run(
            ["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_deployment_is_the_launchers_configuration_for_several_hosts() -> None:
    deployed = DEPLOY.read_text()
    bind = re.search(r"(?m)^\s*bind (\S+)", deployed)
    servers = re.findall(r"(?m)^\s*server (\S+) (\S+) cookie (\S+)", deployed)
    assert bind and len(servers) >= 2
    assert all(name == cookie for name, _, cookie in servers)  # a worker's cookie is its name
    hosts = {address.rsplit(":", 1)[0] for _, address, _ in servers}
    assert len(hosts) >= 2
    rendered = cluster.haproxy_config(bind.group(1), [(n, a) for n, a, _ in servers])
    assert _directives(deployed) == _directives(rendered)


def test_a_spaces_variable_sets_the_workers_but_never_inside_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(cluster.WORKER_ENV, raising=False)
    monkeypatch.setenv(cluster.WORKERS_ENV, "3")
    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    assert parser.parse_args([]).workers == 3
    assert parser.parse_args(["--workers", "2"]).workers == 2
    monkeypatch.setenv(cluster.WORKER_ENV, "w1")  # a worker the launcher started
    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    assert parser.parse_args([]).workers == 1
    monkeypatch.delenv(cluster.WORKER_ENV)
    monkeypatch.setenv(cluster.WORKERS_ENV, "many")
    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    assert parser.parse_args([]).workers == 1
