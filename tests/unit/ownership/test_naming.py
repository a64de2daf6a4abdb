"""Job names (DNS-1035 labels) and the labels tying a job to its Airflow task instance."""

from __future__ import annotations

import re

import pytest

from airflow_provider_disttrain.kube.rules import is_dns1035_label, is_label_value
from airflow_provider_disttrain.ownership.deployment import DEFAULT_DEPLOYMENT_ID, deployment_id
from airflow_provider_disttrain.ownership.naming import (
    DAG_ID_LABEL,
    DAG_KEY_LABEL,
    DEPLOYMENT_LABEL,
    MAP_INDEX_LABEL,
    MAX_NAME_LENGTH,
    RUN_ID_LABEL,
    TASK_ID_LABEL,
    TASK_INSTANCE_LABEL,
    TRY_NUMBER_LABEL,
    dag_key,
    deployment_label_value,
    generate_job_name,
    label_selector,
    legacy_task_instance_key,
    random_suffix,
    sanitize_label_value,
    task_instance_key,
    task_instance_labels,
    to_dns1035,
)

LONG_RUN_ID = "manual__2026-11-30T08:37:02.123456+00:00"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("pytorch-simple", True),
        ("a", True),
        ("job-1", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("", False),
        ("1job", False),
        ("-job", False),
        ("job-", False),
        ("Job", False),
        ("my_job", False),
        ("my.job", False),
        ("job name", False),
    ],
)
def test_is_dns1035_label(name, valid):
    assert is_dns1035_label(name) is valid


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train_model", "train-model"),
        ("Train_Model", "train-model"),
        ("train.model.v2", "train-model-v2"),
        ("123_train", "job-123-train"),
        ("7", "job-7"),
        ("__train__", "train"),
        ("train__--__model", "train-model"),
        ("group.sub_task", "group-sub-task"),
        ("", "job"),
        ("___", "job"),
        ("résumé", "r-sum"),
    ],
)
def test_to_dns1035_turns_task_ids_into_name_stems(text, expected):
    assert to_dns1035(text) == expected


@pytest.mark.parametrize(
    "text", ["train_model", "123", "", "UPPER.case_Mixed", "-leading", "trailing-", "a" * 100, "ÄÖÜ", "..."]
)
def test_to_dns1035_output_is_always_a_valid_name_stem(text):
    stem = to_dns1035(text)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", stem)
    assert "--" not in stem


def test_random_suffix_is_lower_case_alphanumeric():
    suffixes = {random_suffix() for _ in range(50)}
    assert all(re.fullmatch(r"[a-z0-9]{6}", suffix) for suffix in suffixes)
    assert len(suffixes) > 1
    assert len(random_suffix(10)) == 10


def test_generate_job_name_appends_the_suffix():
    assert generate_job_name("train_model", suffix="x7k2p9") == "train-model-x7k2p9"


def test_generate_job_name_uses_a_random_suffix_by_default():
    name = generate_job_name("train_model")
    assert re.fullmatch(r"train-model-[a-z0-9]{6}", name)
    assert is_dns1035_label(name)


@pytest.mark.parametrize("max_length", [63, 54, 40, 20, 8])
def test_generate_job_name_fits_max_length_and_keeps_the_suffix(max_length):
    base = "a_very_long_task_id_that_came_from_a_task_group.and_a_mapped_task_" * 2

    name = generate_job_name(base, max_length=max_length, suffix="x7k2p9")

    assert len(name) <= max_length
    assert name.endswith("-x7k2p9")
    assert is_dns1035_label(name)


def test_generate_job_name_does_not_leave_a_double_dash_where_it_cuts():
    # Cut right after "abc-" the stem would end in "-"; it is stripped.
    name = generate_job_name("abc-defgh", max_length=11, suffix="x7k2p9")
    assert name == "abc-x7k2p9"


@pytest.mark.parametrize("base", ["123", "", "__"])
def test_generate_job_name_from_a_base_that_does_not_start_with_a_letter(base):
    name = generate_job_name(base, suffix="x7k2p9")
    assert name.startswith("job")
    assert is_dns1035_label(name)


def test_generate_job_name_refuses_a_length_with_no_room_for_a_stem():
    with pytest.raises(ValueError, match="max_length 7 leaves no room"):
        generate_job_name("train", max_length=7, suffix="x7k2p9")


def test_generate_job_name_with_one_character_of_room():
    assert generate_job_name("train", max_length=8, suffix="x7k2p9") == "t-x7k2p9"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("train_model", "train_model"),
        (LONG_RUN_ID, "manual__2026-11-30T08_37_02.123456_00_00"),
        ("scheduled__2024-05-14T00:00:00+00:00", "scheduled__2024-05-14T00_00_00_00_00"),
        ("dag with spaces/and slashes", "dag_with_spaces_and_slashes"),
        ("__private", "private"),
        ("-._edge_.-", "edge"),
        ("ok!", "ok"),
        (3, "3"),
        ("", ""),
        ("+++", ""),
    ],
)
def test_sanitize_label_value(value, expected):
    sanitized = sanitize_label_value(value)
    assert sanitized == expected
    assert is_label_value(sanitized)


@pytest.mark.parametrize(
    "value",
    [
        "backfill__" + LONG_RUN_ID * 3,
        "x" * 62 + "_" + "y" * 10,
        "a" * 62 + ".b",
        "dataset_triggered__2026-11-30T08:37:02.123456+00:00_" + "é" * 40,
    ],
)
def test_sanitize_label_value_of_long_values_stays_within_63_characters(value):
    sanitized = sanitize_label_value(value)
    assert 0 < len(sanitized) <= MAX_NAME_LENGTH
    assert is_label_value(sanitized)


def test_sanitize_label_value_cuts_then_trims_a_trailing_separator():
    # The 63rd character is "_": cutting leaves it at the end, where it is not allowed.
    assert sanitize_label_value("a" * 62 + "_tail") == "a" * 62


@pytest.mark.parametrize(
    ("value", "valid"),
    [("", True), ("a", True), ("a-b_c.d", True), ("-a", False), ("a_", False), ("a/b", False), ("a" * 64, False)],
)
def test_is_label_value(value, valid):
    assert is_label_value(value) is valid


def test_task_instance_key_is_stable_and_a_valid_label_value():
    key = task_instance_key("nightly_training", "train", LONG_RUN_ID, -1)

    assert key == task_instance_key("nightly_training", "train", LONG_RUN_ID, -1)
    assert re.fullmatch(r"[0-9a-f]{40}", key)
    assert is_label_value(key)


@pytest.mark.parametrize(
    "other",
    [
        ("nightly_training", "train", LONG_RUN_ID, 0),
        ("nightly_training", "train", LONG_RUN_ID, 1),
        ("nightly_training", "evaluate", LONG_RUN_ID, -1),
        ("other_dag", "train", LONG_RUN_ID, -1),
        ("nightly_training", "train", "manual__2026-11-30T08:37:02.123457+00:00", -1),
        # Joining the parts must not be ambiguous.
        ("nightly_training_train", "", LONG_RUN_ID, -1),
    ],
)
def test_task_instance_key_differs_between_task_instances(other):
    assert task_instance_key(*other) != task_instance_key("nightly_training", "train", LONG_RUN_ID, -1)


def test_run_ids_that_differ_only_past_63_characters_share_a_label_but_not_a_key():
    run_a = "manual__" + "x" * 60 + "a"
    run_b = "manual__" + "x" * 60 + "b"

    labels_a = task_instance_labels("dag", "train", run_a, 0, 1)
    labels_b = task_instance_labels("dag", "train", run_b, 0, 1)

    assert labels_a[RUN_ID_LABEL] == labels_b[RUN_ID_LABEL]
    assert labels_a[TASK_INSTANCE_LABEL] != labels_b[TASK_INSTANCE_LABEL]


@pytest.mark.parametrize(
    ("dag_a", "dag_b"), [("etl", "_etl"), ("données", "donn_es"), ("x" * 63 + "a", "x" * 63 + "b")]
)
def test_dag_ids_that_share_a_label_do_not_share_a_dag_key(dag_a: str, dag_b: str) -> None:
    labels_a = task_instance_labels(dag_a, "train", "r", -1, 1)
    labels_b = task_instance_labels(dag_b, "train", "r", -1, 1)

    assert labels_a[DAG_ID_LABEL] == labels_b[DAG_ID_LABEL]
    assert labels_a[DAG_KEY_LABEL] == dag_key(dag_a) != labels_b[DAG_KEY_LABEL] == dag_key(dag_b)
    assert re.fullmatch(r"[0-9a-f]{40}", labels_a[DAG_KEY_LABEL])  # a valid label value


def test_task_instance_labels_of_a_mapped_task():
    labels = task_instance_labels("nightly_training", "train", LONG_RUN_ID, 3, 2)

    assert labels == {
        DAG_ID_LABEL: "nightly_training",
        TASK_ID_LABEL: "train",
        RUN_ID_LABEL: "manual__2026-11-30T08_37_02.123456_00_00",
        MAP_INDEX_LABEL: "3",
        TRY_NUMBER_LABEL: "2",
        TASK_INSTANCE_LABEL: task_instance_key("nightly_training", "train", LONG_RUN_ID, 3),
        DEPLOYMENT_LABEL: deployment_label_value(DEFAULT_DEPLOYMENT_ID),
        DAG_KEY_LABEL: dag_key("nightly_training"),
    }
    assert all(is_label_value(value) for value in labels.values())


def test_task_instance_labels_of_an_unmapped_task_do_not_claim_map_index_1():
    unmapped = task_instance_labels("nightly_training", "train", LONG_RUN_ID, -1, 1)
    mapped_1 = task_instance_labels("nightly_training", "train", LONG_RUN_ID, 1, 1)

    assert MAP_INDEX_LABEL not in unmapped
    assert mapped_1[MAP_INDEX_LABEL] == "1"
    assert unmapped[TASK_INSTANCE_LABEL] != mapped_1[TASK_INSTANCE_LABEL]


def test_task_instance_labels_share_the_key_across_tries():
    first = task_instance_labels("dag", "train", LONG_RUN_ID, -1, 1)
    retry = task_instance_labels("dag", "train", LONG_RUN_ID, -1, 2)

    assert first[TASK_INSTANCE_LABEL] == retry[TASK_INSTANCE_LABEL]
    assert (first[TRY_NUMBER_LABEL], retry[TRY_NUMBER_LABEL]) == ("1", "2")


def test_task_instance_labels_keys_are_prefixed_label_keys():
    for key in task_instance_labels("dag", "train", LONG_RUN_ID, 0, 1):
        prefix, name = key.split("/")
        assert prefix == "disttrain.airflow.apache.org"
        assert is_label_value(name)


def test_label_selector_is_sorted_and_comma_separated():
    assert label_selector({"b": "2", "a": "1", TASK_INSTANCE_LABEL: "abc"}) == (
        "a=1,b=2,disttrain.airflow.apache.org/task-instance=abc"
    )


def test_label_selector_of_no_labels_is_empty():
    assert label_selector({}) == ""


# -- the deployment ------------------------------------------------------------------------------------


def test_two_deployments_label_the_same_task_instance_differently():
    staging = task_instance_labels("nightly_training", "train", LONG_RUN_ID, -1, 1, deployment_id="staging")
    prod = task_instance_labels("nightly_training", "train", LONG_RUN_ID, -1, 1, deployment_id="prod")

    assert staging[TASK_INSTANCE_LABEL] != prod[TASK_INSTANCE_LABEL]
    assert staging[DEPLOYMENT_LABEL] != prod[DEPLOYMENT_LABEL]
    # Neither is the key jobs carried before the deployment label existed.
    legacy = legacy_task_instance_key("nightly_training", "train", LONG_RUN_ID, -1)
    assert legacy not in (staging[TASK_INSTANCE_LABEL], prod[TASK_INSTANCE_LABEL])


@pytest.mark.parametrize(
    "other",
    [
        "données",  # sanitized to "donn_es"
        "donn_es ",
        "x" * 64 + "-a",  # two ids that share their first 63 characters
    ],
)
def test_the_deployment_label_is_a_hash_of_the_exact_id(other):
    sanitized_alike = {"données": "donn_es", "donn_es ": "donn_es", "x" * 64 + "-a": "x" * 64 + "-b"}[other]
    value = deployment_label_value(other)

    assert value != deployment_label_value(sanitized_alike)
    assert is_label_value(value)
    assert value == deployment_label_value(other)


def test_the_deployment_id_is_read_from_airflow_config(monkeypatch):
    monkeypatch.delenv("AIRFLOW__DISTTRAIN__DEPLOYMENT_ID", raising=False)
    assert deployment_id() == DEFAULT_DEPLOYMENT_ID

    monkeypatch.setenv("AIRFLOW__DISTTRAIN__DEPLOYMENT_ID", "prod-eu\n")
    assert deployment_id() == "prod-eu"
    assert task_instance_labels("d", "t", "r", -1, 1)[DEPLOYMENT_LABEL] == deployment_label_value("prod-eu")
    assert task_instance_key("d", "t", "r", -1) == task_instance_key("d", "t", "r", -1, "prod-eu")

    monkeypatch.setenv("AIRFLOW__DISTTRAIN__DEPLOYMENT_ID", "  ")
    assert deployment_id() == DEFAULT_DEPLOYMENT_ID
