"""MultiKueue: a task killed while its job runs on a worker cluster deletes the job on the manager and says
whether Kueue removed the job's copy on the worker, as a timeout's ending does (``hooks.worker_cluster``)."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.parameters import CleanupPolicy
from tests.unit.fakes import FakeTrainingJobHook, make_context, make_job, running_status
from tests.unit.operators.test_multikueue import WORKER, manager, operator, said


class Killed(BaseException):
    """What the task runner's signal handler raises into ``execute``."""


def killed_while_running(hook: FakeTrainingJobHook, **kwargs: Any) -> Any:
    """The operator, its sync wait interrupted at its third read of the job (dispatched and running)."""
    task = operator(hook, **kwargs)
    dispatch = hook.on_get

    def on_get(number: int) -> None:
        dispatch(number)
        if number == 3:
            raise Killed

    hook.on_get = on_get
    with pytest.raises(Killed):
        task.execute(make_context())
    return task


@pytest.mark.parametrize("copy_removed", [True, False])
def test_a_killed_task_deletes_the_job_on_the_manager_and_checks_the_workers_copy(copy_removed: bool) -> None:
    hook = manager(running_status())
    worker = FakeTrainingJobHook()
    hook.worker_hooks["k8s_worker_1"] = worker
    task = killed_while_running(hook, worker_clusters={WORKER: "k8s_worker_1"})
    uid = hook.only_job()["metadata"]["uid"]
    if not copy_removed:  # Kueue has not removed the worker's copy (yet)
        worker.add_job(make_job(uid="uid-of-the-copy", status=running_status()))

    with structlog.testing.capture_logs() as logged:
        task.on_kill()

    assert hook.called("delete_job") == [(("PyTorchJob", "train-abc", "default"), {"uid": uid})]
    assert hook.job("train-abc") is None and not worker.called("delete_job")  # deleted on the manager only
    if copy_removed:
        assert f"PyTorchJob default/train-abc was deleted. Its copy on worker cluster '{WORKER}' is gone too." in said(
            logged
        )
    else:
        assert any(f"Its copy on worker cluster '{WORKER}' still exists 4s later" in line for line in said(logged))
        assert worker.job("train-abc") is not None


def test_a_killed_task_that_keeps_its_job_reads_nothing_on_the_worker() -> None:
    hook = manager(running_status())
    worker = FakeTrainingJobHook()
    hook.worker_hooks["k8s_worker_1"] = worker
    task = killed_while_running(
        hook, worker_clusters={WORKER: "k8s_worker_1"}, cleanup_policy=CleanupPolicy(on_kill=False)
    )

    task.on_kill()

    assert not hook.called("delete_job") and not worker.calls


def test_a_worker_connection_that_does_not_exist_never_stands_in_the_way_of_the_deletion() -> None:
    hook = manager(running_status())
    hook.worker_hooks["k8s_worker_1"] = FakeTrainingJobHook()
    task = killed_while_running(hook, worker_clusters={WORKER: "k8s_worker_1"})
    del hook.worker_hooks["k8s_worker_1"]  # the worker's connection was deleted since

    with structlog.testing.capture_logs() as logged:
        task.on_kill()

    assert hook.job("train-abc") is None
    assert any("Could not find the worker cluster of PyTorchJob default/train-abc" in line for line in said(logged))
