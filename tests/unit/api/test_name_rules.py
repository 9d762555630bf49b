"""The name rules of `api.names`: what Kafka and Kubernetes accept, and how a name is fitted."""

from __future__ import annotations

import pytest

from distributary.api.names import (
    is_label_value,
    is_topic_name,
    label_value,
    reserved_topic,
    shortened,
    topic_problem,
)


@pytest.mark.parametrize("topic", ["a", "a.b_c-D", "...", "_", "a" * 249])
def test_a_topic_kafka_accepts(topic: str) -> None:
    assert is_topic_name(topic)


@pytest.mark.parametrize("topic", ["", ".", "..", "a" * 250, "a/b", "a b", "ü"])
def test_a_topic_kafka_refuses(topic: str) -> None:
    assert not is_topic_name(topic)


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        "__transaction_state",
        "__cluster_metadata",
        "__anything",
        "distributary.progress",
        "distributary.default.clicks.dlq",
    ],
)
def test_kafka_internal_and_distributary_topics_are_reserved(topic: str) -> None:
    assert reserved_topic(topic) is not None
    assert topic_problem(topic) is not None


@pytest.mark.parametrize(
    "topic", ["_single", "a__b", "distributary", "distributary.clicks", "clicks.dlq", "my.progress"]
)
def test_other_topics_are_not_reserved(topic: str) -> None:
    assert reserved_topic(topic) is None


@pytest.mark.parametrize(("length", "limit"), [(250, 249), (240, 239), (253, 249)])
def test_a_topic_past_its_limit_is_a_problem_that_says_the_limit(length: int, limit: int) -> None:
    assert topic_problem("t" * length, limit) == (
        f"is {length} characters long, more than the {limit} allowed"
    )


@pytest.mark.parametrize("text", ["a", "a" * 10, "a.b-c"])
def test_a_name_that_fits_is_not_shortened(text: str) -> None:
    assert shortened(text, 10) == text
    assert shortened(text, 20, keep=".x") == text + ".x"


@pytest.mark.parametrize("length", [21, 50, 253])
def test_a_long_name_is_cut_to_its_limit_with_a_digest_and_keeps_its_suffix(length: int) -> None:
    text = "n" * length
    short = shortened(text, 20, keep=".dlq")
    assert len(short) == 20
    assert short.endswith(".dlq")
    assert short != shortened("n" * (length - 1) + "m", 20, keep=".dlq")


@pytest.mark.parametrize("text", ["ab.-_" + "c" * 30, "abcde-" + "c" * 30, "abcd._" + "c" * 30])
def test_shortening_is_stable_and_leaves_no_separator_before_the_digest(text: str) -> None:
    short = shortened(text, 14)
    assert short == shortened(text, 14)
    assert len(short) <= 14
    assert not short[: -len("-12345678")].endswith((".", "-", "_"))


@pytest.mark.parametrize("value", ["", "a", "view-1", "A.b_c", "x" * 63])
def test_a_label_value_kubernetes_accepts_is_kept(value: str) -> None:
    assert is_label_value(value)
    assert label_value(value) == value


@pytest.mark.parametrize(
    "value",
    ["x" * 64, "v" * 253, "a/b", "ns/name", "-lead", "trail.", "has space", "a" * 54 + ".-" * 5],
)
def test_any_other_value_becomes_a_valid_label_value(value: str) -> None:
    assert not is_label_value(value)
    fitted = label_value(value)
    assert is_label_value(fitted)
    assert len(fitted) <= 63
    assert fitted != label_value(value + "x")
