"""Cluster calls of the API server with a bound: each request of the UI has a budget of seconds, shared by
every call it makes to the cluster and every wait for another request's LIST.

The routes are sync, so a request that waits holds one of the API server's worker threads: without a
bound a cluster that accepts and never answers takes them all, Airflow's own routes included. The
kubernetes client waits for ever unless a call carries ``_request_timeout``, urllib3 retries a timed-out
GET three more times on its own, and the hook's tenacity retries again: ``BoundedHook`` gives every call
what is left of the budget, turns urllib3's retries off, and once the budget is spent raises
``NoAnswer`` (not an ``OSError``, so tenacity does not retry it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from functools import cached_property, wraps
from typing import Any

from kubernetes import client

from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from airflow_provider_disttrain.ui.listing import NoAnswer

DEFAULT_REQUEST_SECONDS = 10.0
# A socket's timeout may fire a hair before the deadline the budget counts to.
SLACK_SECONDS = 0.05


class Budget(threading.local):
    """The seconds the current thread's request has left (``None``: not in a request, no bound)."""

    seconds: float = DEFAULT_REQUEST_SECONDS
    deadline: float | None = None

    @contextlib.contextmanager
    def started(self, seconds: float) -> Iterator[None]:
        self.seconds, self.deadline = seconds, time.monotonic() + seconds
        try:
            yield
        finally:
            self.deadline = None

    def left(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)

    def spent(self) -> NoAnswer:
        return NoAnswer(f"the Kubernetes API server did not answer within {self.seconds:g} s")


class TimedApi:
    """A kubernetes API object (``CoreV1Api``, ``CustomObjectsApi``) whose every call carries what is left
    of the budget as its ``_request_timeout``."""

    def __init__(self, api: Any, budget: Budget, only: frozenset[str] | None = None) -> None:
        self._api = api
        self._budget = budget
        self._only = only

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._api, name)
        if name == "api_client" and self._only is None:
            # Its raw ``call_api`` serves what no generated method does (Kueue's visibility API): timed too.
            return TimedApi(attribute, self._budget, only=frozenset({"call_api"}))
        if name.startswith("_") or not callable(attribute) or (self._only is not None and name not in self._only):
            return attribute
        return self._timed(attribute)

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        budget = self._budget

        @wraps(call)
        def timed(*args: Any, **kwargs: Any) -> Any:
            left = budget.left()
            if left is not None and left <= 0:
                raise budget.spent()
            # Outside a request (no deadline) a call still has a bound: the budget's length. As a (connect,
            # read) pair: kubernetes < 33 ignores a float timeout (only an int or a pair becomes a
            # urllib3 Timeout), and the budget's seconds left are rarely whole.
            seconds = budget.seconds if left is None else left
            kwargs["_request_timeout"] = (seconds, seconds)
            try:
                return call(*args, **kwargs)
            except Exception as error:
                after = budget.left()
                if after is not None and after <= SLACK_SECONDS:
                    raise budget.spent() from error
                raise

        return timed


class BoundedHook(TrainingJobHook):
    """The provider's hook with every call bounded by ``budget`` (see the module's docstring)."""

    def __init__(self, *, budget: Budget, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.budget = budget

    def get_conn(self) -> client.ApiClient:
        api_client = super().get_conn()
        # One attempt per call: urllib3's own Retry(3) would make one timed-out GET last four budgets.
        api_client.rest_client.pool_manager.connection_pool_kw["retries"] = False
        return api_client

    @cached_property
    def core_v1_client(self) -> Any:
        return TimedApi(client.CoreV1Api(api_client=self.api_client), self.budget)

    @cached_property
    def custom_object_client(self) -> Any:
        return TimedApi(client.CustomObjectsApi(api_client=self.api_client), self.budget)
