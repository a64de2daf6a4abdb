"""The unit tests' fakes take the calls their real classes take (issue 27, item 3).

A fake whose method drifted from the real one (a renamed keyword, a default that changed, a parameter
made keyword-only) lets the code under test call it in a way production would refuse, and the tests
stay green. So every public method a fake shares with its real class must have the same parameters:
names, kinds and defaults, in order (annotations may be looser: a fake says ``Any``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_disttrain.hooks import watch_registry
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from tests.unit.fakes import (
    FakeTrainingJobHook,
    InMemoryWatches,
    ManualClock,
    make_job,
    queued_status,
    running_status,
    succeeded_status,
)

# The fake's own test helpers: public, and not part of the real class.
FAKE_HOOK_HELPERS = {"add_job", "api_calls", "called", "forget", "job", "only_job", "submitted_manifest"}
FAKE_HOOK_HELPERS |= {"restart_container", "write_log"}
# Real methods no unit test needs faked (the fake raises AttributeError if one is ever called).
NOT_FAKED = {"job_pages"}  # the orphan cleanup's paged listing: tests/unit/operators/test_orphans.py uses the API fake


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The public methods ``cls`` and its bases define, leaving out those of Airflow's and other libraries'
    classes (the real hook is a ``KubernetesHook``: the provider's code calls only its own methods)."""
    methods: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not klass.__module__.startswith(("airflow_provider_disttrain", "tests")):
            continue
        methods.update({n: m for n, m in vars(klass).items() if not n.startswith("_") and inspect.isfunction(m)})
    return methods


def shape(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """The parameters as a caller sees them: name, kind and default (not the annotation)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def mismatches(fake: type, real: type) -> dict[str, tuple[Any, Any]]:
    real_methods = public_methods(real)
    return {
        name: (shape(method), shape(real_methods[name]))
        for name, method in public_methods(fake).items()
        if name in real_methods and shape(method) != shape(real_methods[name])
    }


def test_the_fake_hooks_methods_take_the_real_hooks_parameters() -> None:
    assert mismatches(FakeTrainingJobHook, TrainingJobHook) == {}


def test_the_fake_hook_has_every_method_of_the_real_one_and_nothing_else_but_its_helpers() -> None:
    fake, real = set(public_methods(FakeTrainingJobHook)), set(public_methods(TrainingJobHook))
    assert real - fake == NOT_FAKED
    assert fake - real == FAKE_HOOK_HELPERS


def test_the_in_memory_watches_subscribe_as_the_registry_does() -> None:
    fake = shape(InMemoryWatches.subscribe)[1:]  # without self
    real = shape(watch_registry.subscribe)
    # The fake takes the registry's keyword options as **options (it ignores them), the rest exactly.
    assert fake[:-1] == [p for p in real if p[1] is not inspect.Parameter.KEYWORD_ONLY]
    assert fake[-1][1] is inspect.Parameter.VAR_KEYWORD


class _Real:
    def read(self, name: str, *, limit: int = 10) -> str:
        return name


class _Drifted:
    def read(self, name: str, *, limit: int = 20) -> str:
        return name


class _Positional:
    def read(self, name: str, limit: int = 10) -> str:
        return name


@pytest.mark.parametrize("fake", [_Drifted, _Positional], ids=["default", "kind"])
def test_the_check_sees_a_changed_default_or_kind(fake: type) -> None:
    assert set(mismatches(fake, _Real)) == {"read"}
    assert mismatches(_Real, _Real) == {}


def test_the_manual_clock_is_a_whole_clock() -> None:
    """One clock shape (``utils.clock.Clock``): the tests' fake of the worker's clock tells wall and
    monotonic time and sleeps both ways, with the real clock's parameters."""
    from airflow_provider_disttrain.utils.clock import SystemClock
    from tests.unit.fakes import ManualClock

    assert mismatches(ManualClock, SystemClock) == {}
    assert set(public_methods(SystemClock)) <= set(public_methods(ManualClock))
    assert inspect.iscoroutinefunction(ManualClock.sleep) and not inspect.iscoroutinefunction(ManualClock.sleep_sync)


def test_a_fake_on_the_tests_clock_moves_its_job_with_time_not_with_reads() -> None:
    """``clock``/``step_seconds``: a wait that reads the job once more sees the same story."""
    clock = ManualClock(now=1_000.0)
    hook = FakeTrainingJobHook(clock=clock, step_seconds=10.0)
    hook.add_job(make_job(status=queued_status()), [queued_status(), running_status(), succeeded_status()])

    def status() -> dict[str, Any]:
        job = hook.get_job("PyTorchJob", "train-abc", "default")
        assert job is not None
        return job["status"]

    assert [status(), status(), status()] == [queued_status()] * 3
    clock.sleep_sync(10.0)
    assert [status(), status()] == [running_status()] * 2
    clock.sleep_sync(95.0)  # past the last step, the last status stays
    assert status() == succeeded_status()
    with pytest.raises(ValueError, match="together"):
        FakeTrainingJobHook(clock=clock)
