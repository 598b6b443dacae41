"""The plugin's ``chaos_cluster`` fixture: real processes behind real proxies, faults by hand, teardown always."""

from __future__ import annotations

import json
import os

import pytest

from faults import procfs
from faults.network import Partition
from tests.support import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["pytester"]


def test_partition_by_hand_on_a_fixture_cluster(chaos_cluster, chaos_toxiproxy) -> None:
    cluster = chaos_cluster({"token_budget": 10_000_000, "algorithm": {"num_learners": 2}})
    with cluster.client(timeout_s=5.0) as c:
        wait_until(lambda: c.status().merges >= 3, 180, "three merges")
        cut = Partition("p", ("learner-0",))
        cut.inject(cluster)
        try:
            assert chaos_toxiproxy.client().toxics(cluster.proxy("learner-0"))
            base = c.status().merges
            wait_until(lambda: c.status().merges >= base + 5, 60, "merges to go on with learner-1 alone")
        finally:
            cut.heal(cluster)
        assert chaos_toxiproxy.client().toxics(cluster.proxy("learner-0")) == []
    assert all(cluster.alive(u) for u in ("syncer", "learner-0", "learner-1"))


def test_the_fixture_leaves_no_proxy_and_no_process(pytester: pytest.Pytester, toxiproxy_server) -> None:
    """An inner session brings a cluster up with the fixture and records its proxies' tag and processes; once that
    session ended (its teardown ran), none of them is left. Standalone: it needs no other test to have run first."""
    record = pytester.path / "cluster.json"
    pytester.makepyfile(f"""
import json


def test_bring_up(chaos_cluster, chaos_toxiproxy):
    c = chaos_cluster({{"token_budget": 10_000_000, "algorithm": {{"num_learners": 2}}}})
    proxies = [n for n in chaos_toxiproxy.client().proxies() if n.startswith(c.tag)]
    pids = [p.pid for p in c.procs.procs.values()]
    assert len(proxies) == 2 and len(pids) == 3 and all(c.alive(u) for u in ("syncer", "learner-0", "learner-1"))
    open({str(record)!r}, "w").write(json.dumps({{"tag": c.tag, "pids": pids}}))
""")
    pytester.runpytest("-p", "no:cacheprovider", "--chaos-toxiproxy-url", toxiproxy_server.url).assert_outcomes(
        passed=1
    )
    made = json.loads(record.read_text())
    assert [n for n in toxiproxy_server.client().proxies() if n.startswith(made["tag"])] == []
    for pid in made["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped and reaped


def test_chaos_toxiproxy_reuses_a_running_server(
    pytester: pytest.Pytester, toxiproxy_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--chaos-toxiproxy-url (or $DILOCO_TOXIPROXY_URL): the fixture hands out the server already running (a CI
    service, a compose deployment's) instead of starting one; the inner test sees the same server."""
    pytester.makepyfile(f'''
def test_same_server(chaos_toxiproxy):
    assert chaos_toxiproxy.url == "{toxiproxy_server.url}"
    assert chaos_toxiproxy.client().version()
''')
    pytester.runpytest("-p", "no:cacheprovider", "--chaos-toxiproxy-url", toxiproxy_server.url).assert_outcomes(
        passed=1
    )
    monkeypatch.setenv("DILOCO_TOXIPROXY_URL", toxiproxy_server.url)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_chaos_toxiproxy_starts_one_server_for_the_session_and_stops_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No URL: the plugin's fixture starts one server that every module of the session shares, and stops it when
    the session ends. (This suite's conftest gives its own tests their module's server instead: this inner session
    is where the plugin's fixture starts one.)"""
    monkeypatch.delenv("DILOCO_TOXIPROXY_URL", raising=False)
    record = pytester.path / "server.json"
    pytester.makepyfile(
        test_a=f"""
import json

from faults.toxiproxy_server import ToxiproxyServer


def test_started(chaos_toxiproxy):
    assert isinstance(chaos_toxiproxy, ToxiproxyServer) and chaos_toxiproxy.running()
    assert chaos_toxiproxy.client().version()
    open({str(record)!r}, "w").write(json.dumps({{"url": chaos_toxiproxy.url, "pid": chaos_toxiproxy.pid}}))
""",
        test_b=f"""
import json


def test_the_same_server_in_another_module(chaos_toxiproxy):
    seen = json.loads(open({str(record)!r}).read())
    assert (chaos_toxiproxy.url, chaos_toxiproxy.pid) == (seen["url"], seen["pid"])
""",
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    assert not procfs.alive(json.loads(record.read_text())["pid"])
