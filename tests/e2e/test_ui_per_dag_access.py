"""The UI shows each user the jobs of the DAGs Airflow's auth manager lets them read, and nothing else.

The deployment's SimpleAuthManager has roles only (every user reads every DAG), so a second API server of
the deployment runs the FAB auth manager (dev/airflow/fab-api-server.sh: same database and configuration),
whose roles can grant one DAG: `platform` is Admin, `one-dag` reads `disttrain_manifest_first` only. Two
jobs on the cluster carry the labels of task instances of two DAGs (held suspended: no pods, nothing runs);
each user asks the plugin's API on that server with a token from FAB's own login endpoint, and `one-dag`
then opens the page in a real browser (Debian's Chromium, as tests/e2e/test_ui.py) through FAB's login form.

Two DAGs whose ids share their first 63 characters (tests/e2e/dags/disttrain_e2e.py: their jobs carry one
and the same DAG-id label, which is cut to 63) each run one deferred training task on a held job; `team-a`
and `team-b` each read one of them. Side by side in two browser sessions, and through the API, each sees
its own DAG's job and never the other's: the page decides on the hash of the full DAG id, not on the label.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import requests

from airflow_provider_disttrain.ownership.naming import DAG_ID_LABEL, DAG_KEY_LABEL, dag_key, task_instance_labels
from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import COLLIDING_DAG_IDS, DEVAIRFLOW_DIR, NAMESPACE, REPO, Cluster
from tests.e2e.test_ui import SCREENSHOTS, chromium

FAB_URL = f"http://127.0.0.1:{os.environ.get('DEVAIRFLOW_FAB_API_PORT', '28081')}"
READABLE_DAG = "disttrain_manifest_first"
OTHER_DAG = "disttrain_elastic_pytorch"
SCRIPT = REPO / "dev" / "airflow" / "fab-api-server.sh"
# Each user reads exactly one DAG: one-dag the manifest-first example, team-a and team-b a colliding one each.
TEAMS = {"team-a": COLLIDING_DAG_IDS[0], "team-b": COLLIDING_DAG_IDS[1]}
GRANTS = {"one-dag": READABLE_DAG, **TEAMS}


@pytest.fixture(scope="module")
def fab_server(e2e_dags: AirflowRest) -> Iterator[dict[str, str]]:
    """The FAB API server, up; ``{user: password}``. After the e2e DAGs (the colliding ones) are parsed."""
    for dag_id in (READABLE_DAG, OTHER_DAG):  # parsed, so that FAB has a "DAG:<dag_id>" resource for it
        wait_until(lambda dag_id=dag_id: e2e_dags.dag_exists(dag_id), 120, dag_id)
    grants = " ".join(f"{user}={dag_id}" for user, dag_id in GRANTS.items())
    subprocess.run([str(SCRIPT), "start"], check=True, timeout=300, env={**os.environ, "FAB_GRANTS": grants})
    try:
        yield json.loads((DEVAIRFLOW_DIR / "fab-users.json").read_text())
    finally:
        subprocess.run([str(SCRIPT), "stop"], check=False, timeout=120)


def session_of(user: str, password: str) -> requests.Session:
    """A session with the token FAB's login endpoint gives ``user`` (as a script or the UI gets one)."""
    answer = requests.post(f"{FAB_URL}/auth/token", json={"username": user, "password": password}, timeout=60)
    assert answer.status_code == 201, answer.text
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {answer.json()['access_token']}"
    return session


@pytest.fixture(scope="module")
def jobs_of_two_dags(cluster: Cluster) -> Iterator[dict[str, dict[str, Any]]]:
    """``{dag_id: {"name": job, "run_id": ...}}``: one held job per DAG, labelled as the provider labels them."""
    made: dict[str, dict[str, Any]] = {}
    for dag_id in (READABLE_DAG, OTHER_DAG):
        run_id = f"manual__access-{secrets.token_hex(3)}"
        name = f"access-{secrets.token_hex(3)}"
        cluster.custom.create_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            NAMESPACE,
            "pytorchjobs",
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": name, "labels": task_instance_labels(dag_id, "train", run_id, None, 1)},
                "spec": {
                    "runPolicy": {"suspend": True},
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "template": {"spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]}},
                        }
                    },
                },
            },
        )
        made[dag_id] = {"name": name, "run_id": run_id}
    yield made
    for job in made.values():
        cluster.custom.delete_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job["name"])


@pytest.fixture(scope="module")
def colliding_jobs(e2e_dags: AirflowRest, cluster: Cluster) -> Iterator[dict[str, dict[str, Any]]]:
    """``{dag_id: {"name": job, "run_id": ..., "labels": job's labels}}``: the held job of one deferred
    training task of each colliding DAG, made by the real operator in the deployment."""
    runs = {dag_id: e2e_dags.trigger(dag_id) for dag_id in COLLIDING_DAG_IDS}
    try:
        jobs = {}
        for dag_id, run_id in runs.items():
            e2e_dags.wait_for_state(dag_id, run_id, "train", {"deferred"}, 240)
            (job,) = cluster.jobs(dag_id, run_id)  # selected by the DAG-id and run-id labels
            jobs[dag_id] = {"name": job["metadata"]["name"], "run_id": run_id, "labels": job["metadata"]["labels"]}
        yield jobs
    finally:
        for dag_id, run_id in runs.items():
            if e2e_dags.task_instance(dag_id, run_id, "train")["state"] == "deferred":
                e2e_dags.mark(dag_id, run_id, "train", "failed")  # its trigger stops waiting on the job
            cluster.delete_jobs(dag_id, run_id)


def listed(session: requests.Session, names: set[str]) -> set[str]:
    answer = session.get(f"{FAB_URL}/disttrain/api/jobs", timeout=60)
    assert answer.ok, answer.text
    return {row["name"] for row in answer.json()["jobs"]} & names


def log_in(page: Any, user: str, password: str) -> None:
    """Logs ``user`` in through FAB's own login form in a browser page."""
    page.goto(f"{FAB_URL}/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("input[type=submit]")
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)


def tab(session: requests.Session, dag_id: str, run_id: str) -> requests.Response:
    path = f"/disttrain/api/task-instance/{dag_id}/{quote(run_id, safe='')}/train"
    return session.get(f"{FAB_URL}{path}", timeout=60)


def test_a_user_who_reads_one_dag_sees_only_that_dag_s_job(
    fab_server: dict[str, str], jobs_of_two_dags: dict[str, dict[str, Any]]
) -> None:
    platform = session_of("platform", fab_server["platform"])
    one_dag = session_of("one-dag", fab_server["one-dag"])
    ours = {job["name"] for job in jobs_of_two_dags.values()}
    readable, other = jobs_of_two_dags[READABLE_DAG], jobs_of_two_dags[OTHER_DAG]

    # The page: the Admin sees both jobs (once the 5 s cache has a LIST made after they were created).
    wait_until(lambda: listed(platform, ours) == ours, 30, "the Admin to see both jobs")
    assert listed(one_dag, ours) == {readable["name"]}

    # The tab: its DAG's task instance is shown, the other DAG's is refused before the cluster is read.
    shown = tab(one_dag, READABLE_DAG, readable["run_id"])
    assert shown.status_code == 200, shown.text
    assert shown.json()["job"]["name"] == readable["name"]
    assert tab(one_dag, OTHER_DAG, other["run_id"]).status_code == 403
    assert tab(platform, OTHER_DAG, other["run_id"]).json()["job"]["name"] == other["name"]

    # No token, no data; a wrong password gets no token.
    assert requests.get(f"{FAB_URL}/disttrain/api/jobs", timeout=30).status_code == 401
    refused = requests.post(f"{FAB_URL}/auth/token", json={"username": "one-dag", "password": "wrong"}, timeout=30)
    assert refused.status_code == 401


def test_the_page_in_a_browser_lists_only_the_job_of_the_dag_the_user_reads(
    fab_server: dict[str, str], jobs_of_two_dags: dict[str, dict[str, Any]]
) -> None:
    from playwright.sync_api import sync_playwright

    readable, other = jobs_of_two_dags[READABLE_DAG], jobs_of_two_dags[OTHER_DAG]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        log_in(page, "one-dag", fab_server["one-dag"])

        page.goto(f"{FAB_URL}/plugin/training-jobs")
        jobs = page.frame_locator("iframe")
        jobs.locator(f'[data-job="{readable["name"]}"]').wait_for(timeout=60_000)
        shown = jobs.locator("[data-job]")
        names = {shown.nth(i).get_attribute("data-job") for i in range(shown.count())}
        assert readable["name"] in names and other["name"] not in names
        page.screenshot(path=str(SCREENSHOTS / "training-jobs-page-one-dag.png"))
        browser.close()


def test_users_of_two_dags_whose_ids_collide_once_cut_each_see_only_their_own_job(
    fab_server: dict[str, str], colliding_jobs: dict[str, dict[str, Any]]
) -> None:
    """Through the API: team-a and team-b each list their DAG's job only, and open no tab of the other's."""
    names = {dag_id: job["name"] for dag_id, job in colliding_jobs.items()}
    # The premise: both jobs carry the same DAG-id label (the ids cut to 63); only the full ids' hashes differ.
    labels = [job["labels"] for job in colliding_jobs.values()]
    assert labels[0][DAG_ID_LABEL] == labels[1][DAG_ID_LABEL]
    assert [label[DAG_KEY_LABEL] for label in labels] == [dag_key(dag_id) for dag_id in colliding_jobs]

    ours = set(names.values())
    platform = session_of("platform", fab_server["platform"])
    wait_until(lambda: listed(platform, ours) == ours, 30, "the Admin to see both jobs")
    for user, dag_id in TEAMS.items():
        session = session_of(user, fab_server[user])
        answer = session.get(f"{FAB_URL}/disttrain/api/jobs", timeout=60)
        assert answer.ok, answer.text
        rows = [row for row in answer.json()["jobs"] if row["name"] in ours]
        assert [(row["name"], row["task_instance"]["dag_id"]) for row in rows] == [(names[dag_id], dag_id)], user
        (other,) = set(TEAMS.values()) - {dag_id}
        assert tab(session, other, colliding_jobs[other]["run_id"]).status_code == 403, user
        assert tab(session, dag_id, colliding_jobs[dag_id]["run_id"]).json()["job"]["name"] == names[dag_id]


def test_users_of_colliding_dags_side_by_side_in_a_browser_each_see_only_their_own_job(
    fab_server: dict[str, str], colliding_jobs: dict[str, dict[str, Any]]
) -> None:
    """team-a and team-b logged in at once (two browser sessions), each on the Training jobs page."""
    from playwright.sync_api import sync_playwright

    names = {dag_id: job["name"] for dag_id, job in colliding_jobs.items()}
    ours = set(names.values())
    # Both jobs in the server's cached LIST first, so that a page not showing one has filtered it out.
    platform = session_of("platform", fab_server["platform"])
    wait_until(lambda: listed(platform, ours) == ours, 30, "the Admin to see both jobs")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        pages = {}
        for user in TEAMS:  # a context each: its own cookies, as two people on two machines
            page = browser.new_context(viewport={"width": 1400, "height": 700}).new_page()
            log_in(page, user, fab_server[user])
            page.goto(f"{FAB_URL}/plugin/training-jobs")
            pages[user] = page
        for user, page in pages.items():
            jobs = page.frame_locator("iframe")
            own = jobs.locator(f'[data-job="{names[TEAMS[user]]}"]')
            own.wait_for(timeout=60_000)  # the table is drawn from one answer: once one row is in, all are
            shown = jobs.locator("[data-job]")
            seen = {shown.nth(i).get_attribute("data-job") for i in range(shown.count())}
            assert seen & ours == {names[TEAMS[user]]}, (user, seen)
            assert TEAMS[user] in own.inner_text(), user  # the full DAG id, not the label cut to 63
            page.screenshot(path=str(SCREENSHOTS / f"training-jobs-page-{user}.png"))
        browser.close()
