"""The broker's and Connect's JVM options follow Kafka's own start scripts."""

from __future__ import annotations

import pytest

from distributary.local.broker import jvm_performance_options


def test_without_kafkas_variable_the_jvms_use_g1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_JVM_PERFORMANCE_OPTS", raising=False)
    assert jvm_performance_options() == ["-XX:+UseG1GC"]


def test_kafkas_variable_replaces_the_collector_and_its_tuning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_JVM_PERFORMANCE_OPTS", " -XX:+UseSerialGC  -XX:MaxInlineLevel=15 ")
    assert jvm_performance_options() == ["-XX:+UseSerialGC", "-XX:MaxInlineLevel=15"]


def test_an_empty_variable_is_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_JVM_PERFORMANCE_OPTS", "  ")
    assert jvm_performance_options() == ["-XX:+UseG1GC"]
