"""The wait estimate (``kueue.estimate``): a queued job's place over the admission rate of its ClusterQueue,
or why there is too little history to say."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow_provider_disttrain.kueue.estimate import (
    MIN_ADMISSIONS,
    WINDOW_SECONDS,
    AdmissionLog,
    admission,
    estimate_wait,
)
from airflow_provider_disttrain.kueue.position import QueuePosition

NOW = 1_800_000_000.0


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def admitted(uid: str, seconds_ago: float, *, cluster_queue: str = "gpu-a", queue: str = "team-q") -> dict[str, Any]:
    """A Workload Kueue admitted ``seconds_ago`` through ``cluster_queue`` (from LocalQueue ``queue``)."""
    return {
        "metadata": {"name": f"wl-{uid}", "uid": uid},
        "spec": {"queueName": queue},
        "status": {
            "admission": {"clusterQueue": cluster_queue},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(NOW - seconds_ago)},
                {"type": "Admitted", "status": "True", "lastTransitionTime": stamp(NOW - seconds_ago)},
            ],
        },
    }


def pending(uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"wl-{uid}", "uid": uid},
        "spec": {"queueName": "team-q"},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]},
    }


def at(cluster_queue_position: int) -> QueuePosition:
    return QueuePosition("team-q", cluster_queue_position, cluster_queue_position, cluster_queue_position + 1)


def test_six_admissions_in_half_an_hour_put_the_third_in_line_a_quarter_of_an_hour_away() -> None:
    times = [NOW - minutes * 60 for minutes in (2, 7, 12, 17, 22, 27)]

    wait = estimate_wait(3, "gpu-a", times, NOW, local_queue="team-q")

    assert wait.position == 3
    assert wait.estimate_seconds == 3 * WINDOW_SECONDS / 6
    assert wait.explanation == (
        "position 3 in ClusterQueue gpu-a; 6 admissions there in the last 30 min, about one every 5 min: about 15 min"
    )
    assert wait.as_json() == {"position": 3, "estimate_seconds": 900.0, "explanation": wait.explanation}
    assert wait.describe() == f"estimated start: {wait.explanation}"


def test_fewer_admissions_than_the_minimum_give_no_number_and_say_why() -> None:
    times = [NOW - 60.0] * (MIN_ADMISSIONS - 1)

    wait = estimate_wait(2, "gpu-a", times, NOW, local_queue="team-q")

    assert (wait.position, wait.estimate_seconds) == (2, None)
    assert f"only {MIN_ADMISSIONS - 1} admissions there in the last 30 min" in wait.explanation
    assert f"at least {MIN_ADMISSIONS} make an estimate" in wait.explanation
    assert wait.describe().startswith("no start estimate: position 2 in ClusterQueue gpu-a")


def test_a_queue_with_no_admission_says_so() -> None:
    wait = estimate_wait(1, "gpu-a", [], NOW, local_queue="team-q")

    assert wait.estimate_seconds is None
    assert "no admission there in the last 30 min" in wait.explanation


def test_the_window_includes_its_edge_and_nothing_older() -> None:
    edge = [NOW - WINDOW_SECONDS] * MIN_ADMISSIONS
    just_older = [NOW - WINDOW_SECONDS - 1] * MIN_ADMISSIONS

    assert estimate_wait(1, "gpu-a", edge, NOW, local_queue="team-q").estimate_seconds == WINDOW_SECONDS / 3
    assert estimate_wait(1, "gpu-a", just_older, NOW, local_queue="team-q").estimate_seconds is None
    # An admission stamped a little after ``now`` (the API server's clock ahead of this host's) counts.
    ahead = [NOW + 2] * MIN_ADMISSIONS
    assert estimate_wait(1, "gpu-a", ahead, NOW, local_queue="team-q").estimate_seconds == WINDOW_SECONDS / 3


def test_an_unknown_position_gives_no_estimate_whatever_the_history() -> None:
    wait = estimate_wait(None, "gpu-a", [NOW - 60.0] * 10, NOW, local_queue="team-q")

    assert (wait.position, wait.estimate_seconds) == (None, None)
    assert "not known" in wait.explanation


def test_the_log_learns_the_cluster_queue_from_admitted_workloads_and_counts_each_once() -> None:
    log = AdmissionLog()
    workloads = [admitted(f"u{i}", 120 + 300 * i) for i in range(6)] + [pending("mine")]

    log.see_all(workloads)
    log.see_all(workloads)  # a relist, or a watch event of a Workload already seen

    assert log.cluster_queue_of("team-q") == "gpu-a"
    assert len(log.admissions("gpu-a", NOW)) == 6
    wait = log.estimate("team-q", at(1), NOW)
    assert wait.position == 2 and wait.estimate_seconds == 600.0


def test_a_local_queue_none_of_whose_jobs_was_seen_admitted_has_no_known_rate() -> None:
    log = AdmissionLog()
    log.see_all([admitted(f"u{i}", 60, queue="other-q") for i in range(5)] + [pending("mine")])

    wait = log.estimate("team-q", at(0), NOW)

    assert (wait.position, wait.estimate_seconds) == (1, None)
    assert "no job of LocalQueue 'team-q' seen admitted" in wait.explanation


def test_a_finished_workload_counts_and_an_evicted_one_does_not() -> None:
    finished = admitted("done", 60)
    finished["status"]["conditions"].append({"type": "Finished", "status": "True"})
    evicted = admitted("evicted", 60)
    evicted["status"]["conditions"][1]["status"] = "False"

    assert admission(finished) == ("gpu-a", NOW - 60)
    assert admission(evicted) is None
    assert admission(pending("mine")) is None


def test_the_log_is_bounded_in_age_count_and_queues() -> None:
    log = AdmissionLog(max_admissions=4, max_queues=2)
    log.see_all(admitted(f"u{i}", 60 * i) for i in range(10))
    assert log.admissions("gpu-a", NOW) == sorted(NOW - 60 * i for i in range(4))  # the newest four

    log.see(admitted("old", WINDOW_SECONDS + 60, cluster_queue="gpu-b", queue="b-q"))
    assert log.admissions("gpu-b", NOW) == []  # out of the window: forgotten when read

    log.see(admitted("c", 60, cluster_queue="gpu-c", queue="c-q"))
    assert log.cluster_queue_of("team-q") is None  # the least recently seen queue went
    assert log.admissions("gpu-a", NOW) == []
