"""``python app.py --workers N`` behind HAProxy, started as a user starts it (a subprocess, only
the bundled models so each worker starts in seconds): each client is pinned to one worker by
HAProxy's cookie, so a Generate sequence holds across requests; a worker killed mid-class is
started again, its clients are told once, in words, to reload (and then all works), the other
worker's clients notice nothing; and workers on "two hosts" (two groups on loopback, one Redis)
behind ``deploy/haproxy.cfg`` share a follow-me room.

``REQUIRE_CLUSTER=1`` (set by ``.ci/run``) turns the skip where haproxy or redis-server is
missing into a failure."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPOSITORY as ROOT
from serving import (
    GENERATE,
    bundled_only_env,
    free_port,
    launcher,
    sticky_client,
    until,
    worker_of,
)

from ui.serving.cluster import BALANCER_COOKIE, RESTARTED, missing_programs, redis_answers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _programs() -> None:
    problem = missing_programs(need_redis=True)
    if problem:
        if os.environ.get("REQUIRE_CLUSTER") == "1":
            pytest.fail(f"REQUIRE_CLUSTER=1 but {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Path]]:
    """``python app.py --workers 2``: its URL (HAProxy's), the launcher process, its log."""
    folder = tmp_path_factory.mktemp("cluster")
    port = free_port()
    with launcher(["--workers", "2", "--port", str(port)], folder) as process:
        url = f"http://127.0.0.1:{port}/"
        # Both workers serve once new visitors are balanced to two different ones.
        until(
            "two workers",
            lambda: len({worker_of(url)["worker"] for _ in range(4)}) == 2,
            process=process,
        )
        yield url, process, folder / "launcher.log"
        children = _descendants(process.pid)
    # SIGTERM stopped everything it started (HAProxy, both workers, Redis): nothing is left.
    assert process.returncode == 0, (folder / "launcher.log").read_text()[-3000:]
    assert len(children) >= 4 or not Path("/proc").is_dir()
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` now (Linux's /proc; none elsewhere)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        children = {child for child, of in parents.items() if of == parent}
        todo += children - found
        found |= children
    return found


def _two_clients_on_two_workers(url: str) -> tuple[Any, Any]:
    first = sticky_client(url)
    for _ in range(4):  # round robin: the next new visitor goes to the other worker
        second = sticky_client(url)
        if second.cookies[BALANCER_COOKIE] != first.cookies[BALANCER_COOKIE]:
            return first, second
    raise AssertionError("four new clients in a row were balanced to the same worker")


def _steps(client: Any) -> str:
    """One Generate step; the step count the session has reached, as the tab says it."""
    shown = client.predict(*GENERATE, api_name="/generate_step")[0]
    found = re.search(r"\((\d+) steps?\)", shown)
    assert found, shown[:300]
    return found.group(1)


def test_each_client_sticks_to_its_worker(two_workers: tuple[str, Any, Path]) -> None:
    url, _, _ = two_workers
    alice, bob = _two_clients_on_two_workers(url)
    on_alice, on_bob = worker_of(url, alice.cookies), worker_of(url, bob.cookies)
    assert on_alice["pid"] != on_bob["pid"]
    # A session lives in its worker: a client that wandered would start over at step 1.
    assert [_steps(alice) for _ in range(3)] == ["1", "2", "3"]
    assert [_steps(bob) for _ in range(2)] == ["1", "2"]
    assert _steps(alice) == "4"
    assert worker_of(url, alice.cookies) == on_alice and worker_of(url, bob.cookies) == on_bob


def _restart_refusal(client: Any) -> str:
    """The refusal a client of a worker that died gets for its next queued call."""
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.predict(*GENERATE, api_name="/generate_step")
    answer = refused.value.response
    assert answer.status_code == 409, answer.text
    return str(answer.json()["error"])


def test_a_dead_workers_clients_are_told_to_reload_and_the_worker_comes_back(
    two_workers: tuple[str, Any, Path], browser: Any
) -> None:
    from conftest import TIMEOUT_MS
    from test_browser import _drawn, _poll, _selected_tab

    url, process, log = two_workers
    alice, bob = _two_clients_on_two_workers(url)
    assert [_steps(alice) for _ in range(2)] == ["1", "2"]
    assert _steps(bob) == "1"
    dead = worker_of(url, alice.cookies)
    survivor = worker_of(url, bob.cookies)
    # A student's page on the same worker as alice.
    context = browser.new_context()
    context.add_cookies([{"name": BALANCER_COOKIE, "value": dead["worker"], "url": url}])
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        linked = f"{url}?tab=attention&layer=2"  # a view the lecturer shared
        page.goto(linked)
        page.get_by_role("tab", name="Tokenize").wait_for()
        _poll(page, "the linked tab", lambda: _selected_tab(page) == "Attention")
        assert not page.locator("#worker-restarted").count()

        os.kill(dead["pid"], signal.SIGKILL)  # mid-class

        # Alice's next call is answered by another process, which says what to do, in words.
        assert _restart_refusal(alice) == RESTARTED
        # Bob noticed nothing: his session goes on where it was, on the same process.
        assert _steps(bob) == "2"
        assert worker_of(url, bob.cookies) == survivor
        # The page says it by itself, once, in a banner (gradio's lost connection asks the
        # server again; another process answers), and does not reload on its own.
        banner = page.locator("#worker-restarted")
        banner.wait_for()
        assert RESTARTED in banner.inner_text()
        page.wait_for_timeout(3000)  # gradio asks again every 2 s
        assert page.locator("#worker-restarted").count() == 1
        assert page.url == linked
        # Its Reload opens the page again at its address: a new session, on a live process.
        banner.get_by_role("button", name="Reload").click()
        page.wait_for_load_state()
        page.get_by_role("tab", name="Tokenize").wait_for()
        _poll(page, "the linked tab again", lambda: _selected_tab(page) == "Attention")
        assert page.url == linked and not page.locator("#worker-restarted").count()
        _drawn(page, "Attention", 4, ("layer 2",))

        # The launcher started the dead worker again, a new process on the same name.
        def again() -> dict | None:
            found = worker_of(url, {BALANCER_COOKIE: dead["worker"]})
            ok = found["worker"] == dead["worker"] and found["pid"] != dead["pid"]
            return found if ok else None

        until("the dead worker started again", again, process=process)
        assert f"worker {dead['worker']} exited" in log.read_text()
        # After a reload (a new session) alice is served again, from step 1.
        alice = sticky_client(url)
        assert [_steps(alice) for _ in range(2)] == ["1", "2"]
        assert _steps(bob) == "3"
    finally:
        context.close()


def _deploy_config(bind: str, groups: dict[str, list[str]]) -> str:
    """``deploy/haproxy.cfg`` with its addresses replaced: ``bind`` for HAProxy, and each
    server of host ``a`` (``a1``, ``a2``, ...) at ``groups["a"]``'s addresses in order."""
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    text, bound = re.subn(r"(?m)^(\s*bind )\S+", rf"\g<1>{bind}", text)
    assert bound == 1

    def server(found: re.Match) -> str:
        name = found.group(2)
        return f"{found.group(1)}{name} {groups[name[0]][int(name[1:]) - 1]} "

    text, servers = re.subn(r"(?m)^(\s*server )(\w+) (\S+) ", server, text)
    assert servers == sum(len(addresses) for addresses in groups.values()), text
    return text


def test_two_hosts_share_a_room_through_redis(tmp_path: Path, browser: Any) -> None:
    """Two groups of workers stand in for two hosts (``--no-balancer``, one Redis), one
    HAProxy with the deployment's configuration in front: a student pinned to host B follows
    the room a lecturer opened on host A."""
    from conftest import TIMEOUT_MS
    from test_browser import _drawn, _poll, _selected_tab
    from test_browser_follow import _open_follow_me, _room_code

    env = bundled_only_env(tmp_path / "bundled-only")
    redis_port = free_port()
    redis = subprocess.Popen(
        [
            "redis-server",
            *("--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""),
            *("--appendonly", "no", "--dir", str(tmp_path)),
        ],
        stdout=subprocess.DEVNULL,
    )
    haproxy: subprocess.Popen | None = None
    try:
        until("redis", lambda: redis_answers(redis_port))
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        # Each "host" runs one worker (the deployment's second on each host is down: HAProxy
        # marks it so and balances around it).
        ports = {"a": free_port(), "b": free_port()}
        groups = {h: [f"127.0.0.1:{p}", f"127.0.0.1:{free_port()}"] for h, p in ports.items()}
        front = free_port()
        config = tmp_path / "haproxy.cfg"
        config.write_text(_deploy_config(f"127.0.0.1:{front}", groups))
        host = ["--workers", "1", "--no-balancer", "--redis", redis_url, "--host", "127.0.0.1"]
        folder_a, folder_b = tmp_path / "a", tmp_path / "b"
        folder_a.mkdir()
        folder_b.mkdir()
        with (
            launcher([*host, "--port", str(ports["a"])], folder_a, env) as host_a,
            launcher([*host, "--port", str(ports["b"])], folder_b, env) as host_b,
        ):
            haproxy = subprocess.Popen(
                ["haproxy", "-W", "-db", "-f", str(config)],
                stdout=(tmp_path / "haproxy.log").open("w"),
                stderr=subprocess.STDOUT,
            )
            url = f"http://127.0.0.1:{front}/"
            for name, process in (("a1", host_a), ("b1", host_b)):
                until(f"worker {name}", lambda n=name: _is_on(url, n, ports), process=process)
            pages = []
            for name in ("a1", "b1"):
                context = browser.new_context()
                context.add_cookies([{"name": BALANCER_COOKIE, "value": name, "url": url}])
                page = context.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(url)
                page.get_by_role("tab", name="Tokenize").wait_for()
                pages.append(page)
            lecturer, student = pages
            _open_follow_me(lecturer)
            lecturer.get_by_role("button", name="Host a room (lecturer)").click()
            code = _room_code(lecturer)
            _open_follow_me(student)
            student.locator("#room-code textarea, #room-code input").first.fill(code)
            student.get_by_role("button", name="Follow", exact=True).click()
            line = "#room-line"
            _poll(
                student,
                "an answer",
                lambda: {"Following", "⚠️"} & set(student.inner_text(line).split()),
            )
            # Host B knows the room host A opened: it is in the Redis they share.
            assert "Following" in student.inner_text(line), student.inner_text(line)
            lecturer.get_by_role("tab", name="Attention", exact=True).click()
            _drawn(lecturer, "Attention", 4)
            _poll(student, "the lecturer's tab", lambda: _selected_tab(student) == "Attention")
            # Each page stayed on its own host.
            for page, name in ((lecturer, "a1"), (student, "b1")):
                cookies = {c["name"]: c["value"] for c in page.context.cookies()}
                assert cookies[BALANCER_COOKIE] == name
                page.context.close()
    finally:
        for process in (haproxy, redis):
            if process is not None:
                process.terminate()
                process.wait(30)


def _is_on(url: str, name: str, ports: dict[str, int]) -> bool:
    """Whether HAProxy sends cookie ``name`` to that host's worker (its name ends with the
    worker's port under ``--no-balancer``)."""
    return worker_of(url, {BALANCER_COOKIE: name})["worker"].endswith(f"-{ports[name[0]]}")
