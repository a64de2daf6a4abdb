"""``TrainingJobTrigger``: serialization, and one event for every way a wait can end.

The trigger runs for real, with the real shared watch and kubernetes_asyncio client, against a fake
API server on loopback (``tests/unit/fake_apiserver.py``) that the tests script: the job's changes,
refusals, outages, deletions. Poll intervals (the watch's backoff cap) are tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.triggers import watch_trouble
from airflow_provider_disttrain.triggers.stored_kwargs import FLAT_KEYS
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from airflow_provider_disttrain.utils.clock import LoopClock
from tests.unit.fakes import (
    FAILED_MESSAGE,
    FAILED_REASON,
    epoch,
    failed_status,
    make_job,
    queued_status,
    running_status,
    succeeded_status,
)
from tests.unit.triggers.helpers import job, make_trigger, run_once, started
from tests.unit.waiting import until

# Trigger and watch stories run on virtual time (tests/unit/conftest.py: virtual_clock).
pytestmark = pytest.mark.usefixtures("virtual_clock")

# -- serialization ------------------------------------------------------------------------------------------


def test_serialize_round_trips() -> None:
    trigger = TrainingJobTrigger(
        kind="MPIJob",
        name="mpi-1",
        namespace="ml",
        uid="uid-9",
        connection=ClusterConnection(
            "k8s",
            "ctx",
            kubeconfig={"apiVersion": "v1", "clusters": [{"name": "c", "cluster": {"server": "https://k"}}]},
            extras={"namespace": "ml"},
        ),
        startup_deadline=1_700_000_000.5,
        execution_deadline=1_700_003_600.0,
        poll_interval=5.0,
        watch_timeout=120,
        api_failure_tolerance=90.0,
        delete_on_kill=False,
    )

    classpath, kwargs = trigger.serialize()

    assert classpath == "airflow_provider_disttrain.triggers.training_job.TrainingJobTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    rebuilt = import_string(classpath)(**kwargs)
    assert isinstance(rebuilt, TrainingJobTrigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    # Every constructor parameter travels (but those only rows stored by earlier versions carry, and the
    # catch-all of keys from later versions).
    stored_before = {"kubernetes_conn_id", "cluster_context", "config_dict", "connection_extras"}
    named = {
        name
        for name, parameter in inspect.signature(TrainingJobTrigger).parameters.items()
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    }
    # The typed values' fields are written flat as well, for a triggerer of an earlier version
    # (``stored_kwargs.FLAT_KEYS``).
    assert set(kwargs) == (named - stored_before) | set(FLAT_KEYS)


def test_serialize_keeps_the_defaults() -> None:
    classpath, kwargs = TrainingJobTrigger(kind="PyTorchJob", name="a", namespace="b").serialize()

    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)
    assert kwargs["cleanup_policy"]["on_kill"] is True
    assert kwargs["uid"] is None


# -- endings -----------------------------------------------------------------------------------------------------


async def test_success_reported_by_the_watch(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    trigger = make_trigger(apiserver)
    task = await started(trigger, apiserver)

    await apiserver.put(job(succeeded_status()))
    event = await task

    assert event["status"] == "success"
    assert event["state"] == "succeeded"
    assert event["message"] == "PyTorchJob ml/train-abc succeeded"
    assert event["job"]["uid"] == "uid-1"
    assert event["job"]["duration_seconds"] == 600.0
    assert (apiserver.count("list"), apiserver.count("watch"), apiserver.count("get")) == (1, 1, 0)


async def test_failure_carries_the_failed_condition(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    await apiserver.put(job(failed_status()))
    event = await task

    assert event["status"] == "failed"
    assert event["state"] == "failed"
    assert FAILED_REASON in event["message"]
    assert FAILED_MESSAGE in event["message"]


async def test_a_job_already_finished_is_reported_from_the_list(apiserver: Any) -> None:
    await apiserver.put(job(succeeded_status()))

    event = await run_once(make_trigger(apiserver))

    assert event["status"] == "success"
    assert apiserver.count("get") == 0


async def test_startup_deadline_passed_while_queued_is_a_timeout(apiserver: Any) -> None:
    await apiserver.put(job(queued_status()))

    event = await run_once(make_trigger(apiserver, startup_deadline=epoch(-1)))

    assert event["status"] == "timeout"
    assert event["state"] == "queued"
    assert "did not start within startup_timeout" in event["message"]


async def test_startup_deadline_fires_at_its_time_while_nothing_changes(
    apiserver: Any, virtual_clock: LoopClock
) -> None:
    await apiserver.put(job(queued_status()))
    begun = virtual_clock.monotonic()

    event = await run_once(make_trigger(apiserver, startup_deadline=epoch(1.0)))

    assert event["status"] == "timeout"
    # At its own deadline, not at a watch renewal (300 s): the virtual clock makes it exact.
    assert virtual_clock.monotonic() - begun == pytest.approx(1.0, abs=0.02)
    assert apiserver.count("watch") <= 1


async def test_startup_deadline_does_not_apply_once_running(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, startup_deadline=epoch(-60)), apiserver)

    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"


async def test_a_job_seen_running_then_suspended_is_not_held_to_the_startup_limit(apiserver: Any) -> None:
    """The mpi-operator's suspension conditions forget that the job ran; the trigger remembers."""
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, startup_deadline=epoch(0.5), execution_deadline=epoch(2.0)), apiserver)
    await asyncio.sleep(0.1)
    forgetful = {
        "conditions": [
            {"type": "Created", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"},
            {
                "type": "Running",
                "status": "False",
                "reason": "MPIJobSuspended",
                "lastTransitionTime": "2024-05-01T10:01:00Z",
            },
            {"type": "Suspended", "status": "True", "lastTransitionTime": "2024-05-01T10:01:00Z"},
        ]
    }
    await apiserver.put(job(forgetful))

    event = await task

    assert event["status"] == "timeout"
    assert "execution_timeout" in event["message"]  # not "did not start within startup_timeout"


async def test_execution_deadline_reached_while_running(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))

    event = await run_once(make_trigger(apiserver, execution_deadline=epoch(0.5)))

    assert event["status"] == "timeout"
    assert event["state"] == "running"
    assert "execution_timeout" in event["message"]


async def test_each_trigger_fires_at_its_own_deadline_on_one_shared_watch(
    apiserver: Any, virtual_clock: LoopClock
) -> None:
    await apiserver.put(job(running_status()))
    begun = virtual_clock.monotonic()
    finished: dict[float, float] = {}

    async def wait_with(deadline: float) -> None:
        event = await run_once(make_trigger(apiserver, execution_deadline=epoch(deadline)))
        assert event["status"] == "timeout"
        finished[deadline] = virtual_clock.monotonic() - begun

    await asyncio.gather(wait_with(0.3), wait_with(1.0), wait_with(1.6))

    assert finished == pytest.approx({0.3: 0.3, 1.0: 1.0, 1.6: 1.6}, abs=0.02)
    assert apiserver.count("list") == 1


async def test_a_job_that_does_not_exist_is_an_error(apiserver: Any) -> None:
    event = await run_once(make_trigger(apiserver))

    assert event["status"] == "error"
    assert event["state"] is None
    assert event["job"] is None
    assert "no longer exists" in event["message"]
    assert apiserver.count("get") == 1  # not in the watch's view: one read to be sure


async def test_a_job_deleted_during_the_wait_is_an_error(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    await apiserver.remove("ml", "train-abc")
    event = await task

    assert event["status"] == "error"
    assert "deleted outside this task" in event["message"]
    assert event["job"]["uid"] == "uid-1"


async def test_a_job_that_succeeded_and_was_deleted_at_once_is_a_success(apiserver: Any) -> None:
    """A short ttlSecondsAfterFinished: the last object the watch saw says Succeeded."""
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    await apiserver.put(job(succeeded_status()))
    await apiserver.remove("ml", "train-abc")

    assert (await task)["status"] == "success"


async def test_a_job_recreated_under_the_same_name_is_an_error(apiserver: Any) -> None:
    await apiserver.put(job(running_status(), uid="uid-2"))

    event = await run_once(make_trigger(apiserver))

    assert event["status"] == "error"
    assert "recreated" in event["message"]


async def test_a_job_without_the_provider_label_is_followed_by_name(apiserver: Any) -> None:
    """The sensor may wait on a job someone else created: no label, so a watch of its name."""
    await apiserver.put(job(running_status(), labelled=False))
    task = await started(make_trigger(apiserver), apiserver)

    await apiserver.put(job(succeeded_status(), labelled=False))
    event = await task

    assert event["status"] == "success"
    # The labelled watch found no such job; the namespace's watch of all PyTorchJobs has it.
    assert [query.get("labelSelector") for query in apiserver.queries("list")] == [TASK_INSTANCE_LABEL, None]
    assert all(query.get("fieldSelector") is None for query in apiserver.queries("list"))


async def test_waits_on_unlabelled_jobs_share_one_watch_and_leave_the_pool_to_the_others(apiserver: Any) -> None:
    """120 sensors on jobs someone else created, in one namespace: one watch between them, not one each.

    A watch per name held a pooled connection each: at the client's pool size (100) the cluster's other
    watches, the one that sees the provider's own jobs among them, could no longer get one."""
    names = [f"external-{number}" for number in range(120)]
    for name in names:
        await apiserver.put(make_job(name, "ml", uid=f"uid-{name}", status=running_status()))
    await apiserver.put(job(running_status()))  # the provider's own job, labelled
    sensors = [asyncio.create_task(run_once(make_trigger(apiserver, name=name, uid=f"uid-{name}"))) for name in names]
    ours = await started(make_trigger(apiserver), apiserver)
    await until(lambda: len(apiserver.queries("list")) >= 2 and apiserver.open_watches == 2)

    await apiserver.put(job(succeeded_status()))
    assert (await ours)["status"] == "success"
    for name in names:
        await apiserver.put(make_job(name, "ml", uid=f"uid-{name}", status=succeeded_status()))
    events = await asyncio.gather(*sensors)

    assert [event["status"] for event in events] == ["success"] * len(names)
    assert apiserver.max_open_watches == 2  # the labelled watch and the namespace's
    assert [query.get("labelSelector") for query in apiserver.queries("list")] == [TASK_INSTANCE_LABEL, None]


async def test_sensors_deferred_at_once_hand_over_to_the_name_watch_without_a_read_each(apiserver: Any) -> None:
    """120 sensors deferred in one burst (a triggerer's restart) on jobs someone else created: the labelled
    watch's first LIST, sent after they all subscribed, speaks for each of them (not one of the labelled
    jobs), so they go to the namespace's watch, whose LIST has their jobs, without a GET each. With a GET
    each, 1,000 such sensors sent 1,000 reads at once and the triggerer kept ~7 KB a job more memory."""
    names = [f"external-{number}" for number in range(120)]
    for name in names:
        await apiserver.put(make_job(name, "ml", uid=f"uid-{name}", status=succeeded_status()))

    events = await asyncio.gather(*(run_once(make_trigger(apiserver, name=n, uid=f"uid-{n}")) for n in names))

    assert [event["status"] for event in events] == ["success"] * len(names)
    assert [query.get("labelSelector") for query in apiserver.queries("list")] == [TASK_INSTANCE_LABEL, None]
    assert apiserver.count("get") == 0


async def test_sensors_deferred_after_the_watch_listed_read_their_jobs_through_a_few_connections(
    apiserver: Any,
) -> None:
    """120 sensors deferred in one burst once the labelled watch has listed (a labelled job was already
    waited on) each read their job by name: the LIST is older than them, so their job may just have
    been created. Unbounded, those reads opened the client's whole pool of 100 connections, each keeping
    its buffers in the triggerer for good; a few in flight at a time answer the burst all the same."""
    from airflow_provider_disttrain.hooks.cluster_client import MAX_SHORT_REQUESTS

    await apiserver.put(job(running_status()))  # the provider's own job, labelled
    ours = await started(make_trigger(apiserver), apiserver)
    names = [f"external-{number}" for number in range(120)]
    for name in names:
        await apiserver.put(make_job(name, "ml", uid=f"uid-{name}", status=succeeded_status()))

    events = await asyncio.gather(*(run_once(make_trigger(apiserver, name=n, uid=f"uid-{n}")) for n in names))

    assert [event["status"] for event in events] == ["success"] * len(names)
    assert apiserver.count("get") >= len(names)  # every sensor did read its job
    # The short requests' few, and one each for the labelled watch and the namespace's watch.
    assert len(apiserver.client_connections) <= MAX_SHORT_REQUESTS + 2
    await apiserver.put(job(succeeded_status()))
    assert (await ours)["status"] == "success"


async def test_a_sensor_keeps_what_the_watch_would_cache_of_its_job_not_the_whole_spec(apiserver: Any) -> None:
    """A sensor on a job someone else created looks the job up once and keeps that view for the whole
    wait. The whole object (spec, managedFields, annotations) made each such waiter cost several times
    a labelled one, whose view is the watch's trimmed copy."""
    import gc
    import tracemalloc

    def parsed_json_bytes() -> int:
        """Live objects the client parsed from the API server's answers (json's decoder made them)."""
        gc.collect()
        decoded = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/json/decoder.py")])
        return sum(stat.size for stat in decoded.statistics("filename"))

    bulky_spec = {"pytorchReplicaSpecs": {"Master": {"template": {"args": [f"--flag-{i}=value" for i in range(2000)]}}}}
    names = [f"external-{number}" for number in range(40)]
    for name in names:
        await apiserver.put({**make_job(name, "ml", uid=f"uid-{name}", status=running_status()), "spec": bulky_spec})
    tracemalloc.start()
    try:
        sensors = [asyncio.create_task(run_once(make_trigger(apiserver, name=n, uid=f"uid-{n}"))) for n in names]
        # Handed over to the namespace's watch (the labelled one has closed), every look-up answered.
        await until(lambda: len(apiserver.queries("list")) == 2 and apiserver.open_watches == 1)
        await asyncio.sleep(10)
        waiting = parsed_json_bytes()
        for name in names:
            await apiserver.put(make_job(name, "ml", uid=f"uid-{name}", status=succeeded_status()))
        assert [event["status"] for event in await asyncio.gather(*sensors)] == ["success"] * len(names)
        await asyncio.sleep(10)  # the watches linger, then close
        held_per_sensor = (waiting - parsed_json_bytes()) / len(names)
    finally:
        tracemalloc.stop()

    # One job's 2,000 args alone are over 100 KB as Python objects; the trimmed view is a few KB.
    assert held_per_sensor < 10_000, f"{held_per_sensor / 1024:.0f} KB held per waiting sensor"


async def test_a_job_created_after_the_watch_listed_is_picked_up(apiserver: Any) -> None:
    """The operator created the job a moment after the shared watch last listed: the trigger reads it once."""
    await apiserver.put(make_job("other", "ml", uid="o", status=running_status(), labels={TASK_INSTANCE_LABEL: "o"}))
    other = await started(make_trigger(apiserver, name="other", uid="o", execution_deadline=epoch(3)), apiserver)
    await apiserver.put(job(running_status()))
    mine = await started(make_trigger(apiserver), apiserver)

    await apiserver.put(job(succeeded_status()))

    assert (await mine)["status"] == "success"
    assert (await other)["status"] == "timeout"


# -- refusals and outages --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "failure", "expected"),
    [
        ({"good-token"}, ("list", 403, "Forbidden"), "403"),
        (set(), None, "401"),
    ],
)
async def test_a_refusal_on_first_contact_is_an_error_naming_it(
    apiserver: Any, tokens: set[str], failure: tuple[str, int, str] | None, expected: str
) -> None:
    await apiserver.put(job(running_status()))
    apiserver.tokens = tokens
    if failure:
        apiserver.fail_next(failure[0], failure[1], reason=failure[2])

    event = await run_once(make_trigger(apiserver))

    assert event["status"] == "error"
    assert expected in event["message"]
    if expected == "401":
        assert "credentials" in event["message"] and "even after reloading them" in event["message"]
    else:
        assert "RBAC Role" in event["message"]


async def test_a_short_refusal_after_access_worked_is_waited_out(apiserver: Any) -> None:
    """An API server that just restarted answers 403 until its RBAC caches have synced."""
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    apiserver.fail_next("watch", 403, count=3, reason="Forbidden")
    apiserver.fail_next("list", 403, count=1, reason="Forbidden")
    await apiserver.drop_watches()
    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"


async def test_a_refusal_longer_than_the_grace_is_an_error(apiserver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_trouble, "ACCESS_DENIED_GRACE_SECONDS", 0.5)
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    apiserver.fail_next("watch", 403, count=1000, reason="Forbidden")
    apiserver.fail_next("list", 403, count=1000, reason="Forbidden")
    await apiserver.drop_watches()
    event = await task

    assert event["status"] == "error"
    assert "403" in event["message"] and "RBAC" in event["message"]
    assert event["job"]["uid"] == "uid-1"  # the last job seen travels with the error


async def test_an_outage_shorter_than_the_tolerance_is_ridden_out(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    apiserver.fail_next("watch", 503, count=3, reason="ServiceUnavailable")
    await apiserver.drop_watches()
    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"


async def test_an_outage_longer_than_the_tolerance_is_lost_contact(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, api_failure_tolerance=0.5), apiserver)

    apiserver.fail_next("watch", 503, count=1000, reason="ServiceUnavailable")
    apiserver.fail_next("list", 503, count=1000, reason="ServiceUnavailable")
    await apiserver.drop_watches()
    event = await task

    assert event["status"] == "lost_contact"
    assert "lost contact with the API server" in event["message"]
    assert "the job was last seen running" in event["message"]
    assert event["state"] == "running"  # the last job seen


async def test_a_missing_resource_type_is_an_error_at_once(apiserver: Any) -> None:
    apiserver.fail_next("list", 404, reason="NotFound")

    event = await run_once(make_trigger(apiserver, api_failure_tolerance=300))

    assert event["status"] == "error"
    assert "404" in event["message"]


async def test_an_unexpected_exception_is_an_error_event(apiserver: Any) -> None:
    trigger = make_trigger(apiserver, config_dict={"clusters": "not a kubeconfig"})

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "watching PyTorchJob ml/train-abc failed" in event["message"]


# -- the triggerer moving or cancelling triggers ------------------------------------------------------------------


async def test_a_cancelled_trigger_leaves_the_shared_watch_to_the_others(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    stays = await started(make_trigger(apiserver), apiserver)
    moved = await started(make_trigger(apiserver), apiserver)

    moved.cancel()
    await asyncio.gather(moved, return_exceptions=True)
    await apiserver.put(job(succeeded_status()))

    assert (await stays)["status"] == "success"
    assert apiserver.count("list") == 1


# -- on_kill -------------------------------------------------------------------------------------------------------


async def test_on_kill_deletes_the_job_with_its_uid(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))

    await make_trigger(apiserver, delete_on_kill=True).on_kill()

    assert ("ml", "pytorchjobs", "train-abc") not in apiserver.objects
    assert apiserver.count("delete") == 1


async def test_on_kill_spares_a_job_recreated_under_the_same_name(apiserver: Any) -> None:
    await apiserver.put(job(running_status(), uid="uid-new"))

    await make_trigger(apiserver, delete_on_kill=True).on_kill()

    assert ("ml", "pytorchjobs", "train-abc") in apiserver.objects  # the uid precondition refused


async def test_on_kill_leaves_the_job_when_asked_to(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))

    await make_trigger(apiserver, delete_on_kill=False).on_kill()

    assert apiserver.count("delete") == 0


# -- deadlines confirmed, and no busy-wait (the fault model) ---------------------------------------------------


def silently(apiserver: Any, status: dict[str, Any]) -> None:
    """Change the job on the server without an event: a watch that went silent misses it."""
    stored = apiserver.objects[("ml", "pytorchjobs", "train-abc")]
    stored["status"] = status
    apiserver.resource_version += 1
    stored["metadata"]["resourceVersion"] = str(apiserver.resource_version)


async def test_a_timeout_is_confirmed_with_one_get_which_may_find_the_job_succeeded(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, execution_deadline=epoch(30)), apiserver)

    silently(apiserver, succeeded_status())
    event = await task

    assert event["status"] == "success"
    assert apiserver.count("get") == 1


async def test_a_startup_timeout_is_confirmed_too(apiserver: Any) -> None:
    await apiserver.put(job(queued_status()))
    task = await started(make_trigger(apiserver, startup_deadline=epoch(30)), apiserver)

    silently(apiserver, running_status())  # it started: the startup limit no longer applies
    await asyncio.sleep(60)
    assert not task.done()
    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"
    assert apiserver.count("get") == 1  # once, not on every look at the stale cache


async def test_a_confirmed_timeout_carries_the_servers_view(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))

    event = await run_once(make_trigger(apiserver, execution_deadline=epoch(5)))

    assert event["status"] == "timeout" and event["state"] == "running"
    assert apiserver.count("get") == 1


class LoopCounter:
    """Counts the trigger's waits (one per look at its job); a spin is stopped after ``limit``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, limit: int = 10_000) -> None:
        from airflow_provider_disttrain.hooks.shared_watch import Subscription

        self.count = 0
        real_wait = Subscription.wait

        async def counted(subscription: Subscription, timeout: float | None) -> None:
            self.count += 1
            if self.count > limit:
                raise RuntimeError(f"busy loop: {self.count} waits")
            await real_wait(subscription, timeout)

        monkeypatch.setattr(Subscription, "wait", counted)


async def test_no_busy_wait_before_the_first_list_when_the_startup_deadline_has_passed(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch, virtual_clock: LoopClock
) -> None:
    """The triggerer starts during an API outage, with a trigger whose job is older than its startup limit."""
    loops = LoopCounter(monkeypatch)
    await apiserver.put(job(queued_status()))
    await apiserver.outage(30)

    event = await run_once(make_trigger(apiserver, startup_deadline=epoch(-10)))

    assert event["status"] == "timeout"  # judged once the server could be read
    assert virtual_clock.monotonic() >= 30
    assert loops.count <= 5


async def test_no_busy_wait_during_an_outage(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch, virtual_clock: LoopClock
) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, api_failure_tolerance=300), apiserver)
    loops = LoopCounter(monkeypatch)

    await apiserver.outage(120)
    await asyncio.sleep(130)
    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"
    assert loops.count <= 5  # the outage's start and end, the success


async def test_a_watch_stream_cut_in_the_middle_of_a_line_is_ridden_out(apiserver: Any) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    apiserver.cut_watches = 1
    await apiserver.expire_watches()  # the renewed watch is the one cut short
    await asyncio.sleep(5)
    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"
