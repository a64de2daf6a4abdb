"""The shared watch, through the real kubernetes_asyncio client, against a fake API server on loopback.

Each test is one story of what the API server does (events, bookmarks, a 410 after a restart, a
silent connection, expired credentials) and what the subscribers see.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_disttrain.hooks import cluster_client, shared_watch
from airflow_provider_disttrain.hooks.watch_registry import registry, subscribe
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.utils.clock import LoopClock
from tests.unit.fakes import failed_status, make_job, running_status, succeeded_status
from tests.unit.waiting import until

# Trigger and watch stories run on virtual time (tests/unit/conftest.py: virtual_clock).
pytestmark = pytest.mark.usefixtures("virtual_clock")

PYTORCH = get_job_kind("PyTorchJob")
SELECTOR = TASK_INSTANCE_LABEL


def labelled_job(name: str, status: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return make_job(name, "ml", uid=f"uid-{name}", status=status, labels={TASK_INSTANCE_LABEL: name}, **kwargs)


def connection(server: Any, **user: Any) -> ClusterConnection:
    return ClusterConnection(kubeconfig=server.kubeconfig(user=user or None))


def exec_plugin_user(plugin: Path) -> dict[str, Any]:
    """A kubeconfig user whose token comes from running ``plugin`` (as aws, gcloud or kubelogin run)."""
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }


def real_plugin_runs_take_real_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin is a real subprocess: while the loop waits for it, virtual time runs ahead to the next
    timer, so the client build's timeout must not be the next one."""
    monkeypatch.setattr(cluster_client, "BUILD_TIMEOUT_SECONDS", 10 * 3600.0)


def last_condition(subscription: Any) -> str | None:
    """The newest condition type of the subscription's cached job."""
    entry = subscription.entry
    conditions = ((entry.job.get("status") or {}).get("conditions") or []) if entry else []
    return conditions[-1]["type"] if conditions else None


async def test_one_list_and_one_watch_serve_every_subscriber(apiserver: Any) -> None:
    for name in ("a", "b", "c"):
        await apiserver.put(labelled_job(name, running_status()))
    await apiserver.put(make_job("not-ours", "ml", status=running_status()))  # no provider label

    async with (
        subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub_a,
        subscribe(connection(apiserver), PYTORCH, "ml", "b", label_selector=SELECTOR) as sub_b,
        subscribe(connection(apiserver), PYTORCH, "ml", "c", label_selector=SELECTOR) as sub_c,
    ):
        await until(lambda: sub_a.synced)
        assert sub_b.entry is not None and sub_c.entry is not None
        assert "not-ours" not in sub_a.watch._jobs  # the label selector kept it out of the cache

        await apiserver.put(labelled_job("b", succeeded_status()))
        await until(lambda: last_condition(sub_b) == "Succeeded")

        assert sub_a.watch is sub_b.watch is sub_c.watch
        assert apiserver.count("list") == 1
        assert apiserver.count("watch") == 1
        assert apiserver.queries("list")[0]["labelSelector"] == TASK_INSTANCE_LABEL


async def test_only_the_changed_jobs_subscribers_are_woken(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    await apiserver.put(labelled_job("b", running_status()))
    async with (
        subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub_a,
        subscribe(connection(apiserver), PYTORCH, "ml", "b", label_selector=SELECTOR) as sub_b,
    ):
        await until(lambda: sub_a.synced and apiserver.open_watches == 1)
        sub_a._changed.clear()
        sub_b._changed.clear()

        await apiserver.put(labelled_job("a", succeeded_status()))
        await asyncio.wait_for(sub_a.wait(None), 5)

        assert not sub_b._changed.is_set()


async def test_the_cache_keeps_identity_and_status_not_the_spec(apiserver: Any) -> None:
    job = labelled_job("a", running_status())
    job["metadata"]["managedFields"] = [{"manager": "training-operator", "fieldsV1": {"f:status": {}}}]
    await apiserver.put(job)

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced)
        cached = sub.entry.job

    assert set(cached) == {"apiVersion", "kind", "metadata", "status"}
    assert "managedFields" not in cached["metadata"]
    assert cached["metadata"]["uid"] == "uid-a"
    assert cached["status"] == job["status"]


async def test_a_listed_job_is_cached_as_objects_of_its_own_not_parts_of_the_page(apiserver: Any) -> None:
    """The few parts the cache keeps of each listed job (labels, status) are copies made after the page
    was freed: parts of the page itself would pin most of its memory (CPython returns an arena of
    objects only once all of them are freed), ~7 KB a job at 1,000 (bench/trigger_startup.py --unlabelled)."""
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced)
        page = {
            "metadata": {"resourceVersion": "7"},
            "items": [labelled_job("a", running_status()), labelled_job("nobody-waits", running_status())],
        }
        status, labels = page["items"][0]["status"], page["items"][0]["metadata"]["labels"]

        kept = sub.watch._compacted(page)

    assert kept == [shared_watch.trimmed(labelled_job("a", running_status()))]
    assert kept[0]["status"] is not status and kept[0]["metadata"]["labels"] is not labels
    assert page == {}  # freed before the copies were made (the caller read the page's metadata first)


async def test_a_renewed_watch_resumes_from_the_last_bookmark(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.bookmark_interval = 0.2
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=1) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        listed_at = int(apiserver.queries("watch")[0]["resourceVersion"])
        await apiserver.put(labelled_job("unrelated", running_status()), plural="mpijobs")  # moves the version
        await until(lambda: apiserver.count("watch") >= 2)

        renewal = apiserver.queries("watch")[1]
        assert int(renewal["resourceVersion"]) > listed_at  # from the bookmark, not the list
        assert renewal["allowWatchBookmarks"].lower() == "true"
        assert renewal["timeoutSeconds"] == "1"
        assert apiserver.count("list") == 1  # a normal renewal needs no relist


async def test_410_gone_relists_and_watches_from_the_lists_version(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=1) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        # An API server restart: the history is gone, and the job changed meanwhile.
        apiserver.compact()
        apiserver.events.clear()
        apiserver.objects[("ml", "pytorchjobs", "a")]["status"] = succeeded_status()
        apiserver.resource_version += 1
        apiserver.objects[("ml", "pytorchjobs", "a")]["metadata"]["resourceVersion"] = str(apiserver.resource_version)

        await until(lambda: last_condition(sub) == "Succeeded")

        # The next watch starts from the relist's version (it may be a moment behind the cache update).
        await until(lambda: int(apiserver.queries("watch")[-1]["resourceVersion"]) == apiserver.resource_version)
        assert apiserver.count("list") == 2
        assert sub.problem is None


async def test_repeated_410s_back_off_instead_of_looping(apiserver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watch cache that keeps answering 410 must not turn into a hot loop of LIST + WATCH."""
    await apiserver.put(labelled_job("a", running_status()))

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, poll_interval=1.0) as sub:
        await until(lambda: sub.synced)
        apiserver.compacted_below = 10**9  # every watch, from any version, is answered 410
        requests_before = len(apiserver.requests)
        await asyncio.sleep(2.0)

    # Backoff of 0.5 s, 1 s (capped by poll_interval) with jitter: a handful, not hundreds.
    assert len(apiserver.requests) - requests_before <= 12


async def test_a_silent_connection_is_ended_by_the_client_side_timeout(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_watch, "CLIENT_TIMEOUT_MARGIN_SECONDS", 0.5)
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.hang_watches = True  # the server accepts the watch and never sends or closes

    async with subscribe(
        connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=1, poll_interval=0.1
    ) as sub:
        await until(lambda: apiserver.count("watch") >= 2)
        assert sub.problem is not None and sub.problem.status is None  # a client-side timeout

        apiserver.hang_watches = False
        await apiserver.put(labelled_job("a", succeeded_status()))
        await until(lambda: last_condition(sub) == "Succeeded")
        await until(lambda: sub.problem is None)


async def test_transient_failures_are_retried_and_reported_while_they_last(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.fail_next("list", 503, count=2, reason="ServiceUnavailable")

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, poll_interval=0.05) as sub:
        await until(lambda: sub.problem is not None)
        assert sub.problem.status == 503 and not sub.problem.fatal and not sub.problem.denied

        await until(lambda: sub.synced)

        assert sub.problem is None
        assert apiserver.count("list") == 3


async def test_an_answer_that_retrying_cannot_fix_is_fatal(apiserver: Any) -> None:
    """A 404 of the collection: the CRD is not installed (or the kind is served under another version)."""
    apiserver.fail_next("list", 404, reason="NotFound")

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.problem is not None)

        assert sub.problem.fatal and sub.problem.status == 404


async def test_a_401_rebuilds_the_client_with_fresh_credentials(
    apiserver: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exec plugin's token expires mid-wait: the 401 re-runs the plugin, the watch goes on."""
    real_plugin_runs_take_real_time(monkeypatch)
    token_file = tmp_path / "token"
    runs = tmp_path / "runs"
    token_file.write_text("token-1")
    apiserver.tokens = {"token-1"}
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"pathlib.Path({str(runs)!r}).open('a').write('run\\n')\n"
        f"token = pathlib.Path({str(token_file)!r}).read_text().strip()\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',"
        " 'status': {'token': token}}))\n"
    )
    exec_user = exec_plugin_user(plugin)
    await apiserver.put(labelled_job("a", running_status()))

    async with subscribe(connection(apiserver, **exec_user), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        generation = sub.watch.cluster.generation
        # The token is revoked and the plugin now issues a new one; the current watch is cut.
        apiserver.tokens = {"token-2"}
        token_file.write_text("token-2")
        await apiserver.drop_watches()  # the next request must authenticate again

        # The plugin is a real subprocess: much virtual time passes while the loop waits for it.
        await until(lambda: sub.watch.cluster.generation > generation, within=3600)
        await apiserver.put(labelled_job("a", succeeded_status()))
        await until(lambda: last_condition(sub) == "Succeeded")

        assert sub.problem is None
        assert runs.read_text().count("run") >= 2


async def test_a_401_that_a_fresh_client_also_gets_is_reported_as_such(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.tokens = set()  # nothing is accepted

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, poll_interval=0.05) as sub:
        await until(lambda: sub.problem is not None)

        assert sub.problem.status == 401 and sub.problem.denied
        assert sub.watch.cluster.generation >= 2  # it did try new credentials first
        assert not sub.watch.ever_synced


async def test_a_deleted_job_leaves_a_tombstone_for_its_subscribers_only(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    await apiserver.put(labelled_job("b", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)

        await apiserver.remove("ml", "a")
        await apiserver.remove("ml", "b")
        await until(lambda: sub.entry is not None and sub.entry.deleted)
        await until(lambda: "b" not in sub.watch._jobs)

        assert sub.entry is not None and sub.entry.deleted
        assert sub.entry.job["metadata"]["uid"] == "uid-a"


async def test_a_job_gone_while_the_watch_was_broken_is_found_by_the_relist(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=1) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        del apiserver.objects[("ml", "pytorchjobs", "a")]  # deleted while nobody could see the event
        apiserver.compact()

        await until(lambda: sub.entry is not None and sub.entry.deleted)


async def test_the_watch_stops_after_its_last_subscriber_and_closes_the_client(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        watch = sub.watch

    await until(lambda: not registry().watches and not registry().clusters)
    await until(lambda: apiserver.open_watches == 0)
    await until(lambda: not registry()._closing)
    assert watch._task is None
    assert [task for task in asyncio.all_tasks() if "shared-watch" in task.get_name()] == []


async def test_a_subscriber_arriving_within_the_linger_reuses_the_watch(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_watch, "LINGER_SECONDS", 1.0)
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as first:
        await until(lambda: first.synced)
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as second:
        assert second.watch is first.watch and second.synced  # warm: no new LIST needed
        assert second.entry is None  # nobody waited for it meanwhile: the newcomer reads it once
        await apiserver.put(labelled_job("a", succeeded_status()))
        await until(lambda: last_condition(second) == "Succeeded")  # and then follows it on the watch
    assert apiserver.count("list") == 1


async def test_the_cache_holds_only_the_jobs_someone_waits_for(apiserver: Any) -> None:
    """Issue 15: a namespace's history of finished labelled jobs was all cached, and all relisted at once."""
    for index in range(1_200):  # more than two pages
        await apiserver.put(labelled_job(f"old-{index:04d}", succeeded_status()))
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced)
        await apiserver.put(labelled_job("old-0001", failed_status()))  # an event for a job nobody waits for
        await apiserver.put(labelled_job("a", succeeded_status()))
        await until(lambda: last_condition(sub) == "Succeeded")

        assert set(sub.watch._jobs) == {"a"}
        pages = apiserver.queries("list")
        assert [page.get("limit") for page in pages] == [str(shared_watch.LIST_PAGE_SIZE)] * 3
        assert pages[0].get("continue") is None and pages[1].get("continue") and pages[2].get("continue")


async def test_watches_of_one_cluster_share_its_client(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    await apiserver.put(labelled_job("m", running_status()), plural="mpijobs")
    mpi = get_job_kind("MPIJob")
    async with (
        subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as torch_sub,
        subscribe(connection(apiserver), mpi, "ml", "m", label_selector=SELECTOR) as mpi_sub,
        subscribe(connection(apiserver), PYTORCH, "ml", "a", field_selector="metadata.name=a") as by_name,
    ):
        await until(lambda: torch_sub.synced and mpi_sub.synced and by_name.synced)

        assert len({id(torch_sub.watch), id(mpi_sub.watch), id(by_name.watch)}) == 3
        assert torch_sub.watch.cluster is mpi_sub.watch.cluster is by_name.watch.cluster
        assert mpi_sub.entry is not None and by_name.entry is not None
        assert apiserver.queries("list")[-1].get("fieldSelector") in (None, "metadata.name=a")


async def test_read_gets_one_job_through_the_shared_client(apiserver: Any) -> None:
    await apiserver.put(make_job("plain", "ml", uid="uid-p", status=running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "plain", label_selector=SELECTOR) as sub:
        found = await sub.read()
        missing = await sub.watch.read("nothing-here")

    assert found is not None and found["metadata"]["uid"] == "uid-p"
    assert missing is None


async def test_a_quiet_job_renews_its_watch_without_a_warning(apiserver: Any, caplog: pytest.LogCaptureFixture) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    caplog.set_level("DEBUG", logger=shared_watch.__name__)

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=1) as sub:
        await until(lambda: apiserver.count("watch") >= 3)

        assert sub.problem is None
    assert apiserver.count("list") == 1  # one request per renewal, no relist, no polling
    assert [record for record in caplog.records if record.levelname == "WARNING"] == []


async def test_an_outage_is_logged_once_not_per_retry(apiserver: Any, caplog: pytest.LogCaptureFixture) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.fail_next("list", 503, count=5, reason="ServiceUnavailable")

    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, poll_interval=0.05) as sub:
        await until(lambda: sub.synced)

    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1 and "503" in warnings[0]
    assert any("works again" in record.getMessage() for record in caplog.records)


# -- the fault model (hooks/faults.py) through the real client ----------------------------------------------


async def test_a_watch_silent_for_two_bookmark_intervals_is_restarted(apiserver: Any, virtual_clock: LoopClock) -> None:
    """A half-open connection: no event and no BOOKMARK. Found after about two minutes, not at the
    client's total timeout (watch_timeout + 30 s)."""
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.bookmark_interval = None  # the server (or a proxy holding the connection) says nothing
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=300) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        begun = virtual_clock.monotonic()

        await until(lambda: apiserver.count("watch") >= 2, within=250)

        assert virtual_clock.monotonic() - begun == pytest.approx(shared_watch.SILENCE_LIMIT_SECONDS, abs=1)
        assert apiserver.queries("watch")[0]["allowWatchBookmarks"].lower() == "true"
        assert apiserver.count("list") == 1  # it resumes from its version: nothing was missed


async def test_bookmarks_keep_a_quiet_watch_alive(apiserver: Any, virtual_clock: LoopClock) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, watch_timeout=300) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)

        await virtual_clock.sleep(290)  # bookmarks every 60 s, nothing else

        assert apiserver.count("watch") == 1 and sub.problem is None


async def test_a_stream_cut_in_the_middle_of_a_line_is_retried(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    apiserver.cut_watches = 2
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: apiserver.count("watch") >= 3 and apiserver.open_watches == 1)
        await apiserver.put(labelled_job("a", succeeded_status()))
        await until(lambda: last_condition(sub) == "Succeeded")

        assert sub.problem is None


async def test_a_410_inside_an_open_watch_relists(apiserver: Any) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)

        await apiserver.expire_watches()
        await until(lambda: apiserver.count("list") == 2 and apiserver.open_watches == 1)

        assert sub.problem is None


async def test_one_tiny_poll_interval_does_not_raise_the_retry_rate(apiserver: Any, virtual_clock: LoopClock) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR, poll_interval=0.01) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        await apiserver.outage(3600)
        requests_before = len(apiserver.requests)

        await virtual_clock.sleep(60)

        # The cap's floor (1 s, jittered down to 0.5 s): at most two requests a second, not a hundred.
        assert len(apiserver.requests) - requests_before <= 2 * 60 + 2
        assert sub.problem is not None and not sub.problem.fatal


async def test_subscribers_wake_when_an_outage_starts_and_ends_not_per_retry(
    apiserver: Any, virtual_clock: LoopClock
) -> None:
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        wakes = 0
        real_notify = sub.notify

        def counted() -> None:
            nonlocal wakes
            wakes += 1
            real_notify()

        sub.notify = counted  # type: ignore[method-assign]
        await apiserver.outage(60)
        await until(lambda: sub.problem is not None)
        await until(lambda: sub.problem is None and apiserver.open_watches == 1, within=600)

        assert apiserver.count("watch") + apiserver.count("list") > 10  # it did retry through the outage
        assert wakes <= 3  # its start, its end (and the relist's view of the job)


async def test_an_exec_plugin_failing_during_a_renewal_is_an_outage_not_a_refusal(
    apiserver: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A throttled STS call: the plugin fails once while the client is rebuilt after a 401."""
    real_plugin_runs_take_real_time(monkeypatch)
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "count = len(runs.read_text().splitlines()) if runs.exists() else 0\n"
        "runs.open('a').write('run\\n')\n"
        "if count == 1:\n"
        "    sys.exit('Rate exceeded')\n"
        "token = 'token-1' if count == 0 else 'token-2'\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',"
        " 'status': {'token': token}}))\n"
    )
    exec_user = exec_plugin_user(plugin)
    apiserver.tokens = {"token-1"}
    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver, **exec_user), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced and apiserver.open_watches == 1)
        problems: list[Any] = []
        real_notify = sub.notify

        def noted() -> None:
            problems.append(sub.problem)
            real_notify()

        sub.notify = noted  # type: ignore[method-assign]
        apiserver.tokens = {"token-2"}
        await apiserver.expire_watches()  # the relist that follows gets a 401

        await until(lambda: runs.read_text().count("run") >= 3, within=3600)
        await apiserver.put(labelled_job("a", succeeded_status()))
        await until(lambda: last_condition(sub) == "Succeeded", within=3600)

    seen = [problem for problem in problems if problem is not None]
    assert seen, "the failed plugin run was reported while it lasted"
    assert all(not problem.denied and not problem.fatal for problem in seen)
    assert "Rate exceeded" in str(seen[0].error)


async def test_a_closed_client_is_never_built_again(apiserver: Any) -> None:
    """A straggler (a log follower of a trigger gone) must not rebuild the client the registry closed."""
    from airflow_provider_disttrain.hooks.cluster_client import ClusterClientClosed

    await apiserver.put(labelled_job("a", running_status()))
    async with subscribe(connection(apiserver), PYTORCH, "ml", "a", label_selector=SELECTOR) as sub:
        await until(lambda: sub.synced)
        cluster = sub.watch.cluster
    await until(lambda: not registry().clusters and not registry()._closing)
    built = cluster.generation

    with pytest.raises(ClusterClientClosed):
        async with cluster.lease():
            pass
    assert cluster.generation == built
