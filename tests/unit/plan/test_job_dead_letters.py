"""A StreamJob's dead letters: the topic the operator makes for them, how the job learns its name,
which Log takes it along when deleted, and the count in the job's status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.unit.plan.test_job_plan import env, job, planned, running
from tests.unit.plan.test_view_plan import log

from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.plan.applications.spark_state import AppState
from distributary.plan.jobs.job_plan import dead_letter_log
from distributary.plan.jobs.job_status import job_status
from distributary.plan.logs.log_deletion import deleted_topics
from distributary.plan.views.view_status import RunObservation

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RUNNING = AppState("RUNNING", running=True)
TOPIC = "distributary.shop.enrich.dlq"


def a_log(name: str, **spec: Any) -> Log:
    body = log(name)
    return Log.model_validate({**body, "spec": {**body["spec"], **spec}})


def test_the_job_is_told_its_dead_letter_topic() -> None:
    assert env(planned(job()))["DISTRIBUTARY_DEAD_LETTER_TOPIC"] == TOPIC


def test_the_topic_is_never_compacted_and_kept_as_long_as_the_spec_says() -> None:
    enriched = log("enriched")
    enriched["spec"] = {**enriched["spec"], "partitions": 6, "compaction": True, "key": ["user"]}
    logs = [log("clicks"), enriched]
    plan = planned(job(deadLetters={"retention": "30d"}), logs=logs)
    assert plan.dead_letters is not None
    assert plan.dead_letters.log.metadata.name == "enriched"  # the first output
    topic = plan.dead_letters.topic
    assert (topic.name, topic.partitions) == (TOPIC, 6)
    assert topic.configs == {"cleanup.policy": "delete", "retention.ms": str(30 * 86_400_000)}
    default = planned(job()).dead_letters
    assert default is not None
    assert default.topic.configs["retention.ms"] == str(7 * 86_400_000)


def test_a_job_without_outputs_keeps_its_dead_letters_with_its_first_input() -> None:
    plan = planned(job(outputs=[]))
    assert plan.dead_letters is not None
    assert plan.dead_letters.log.metadata.name == "clicks"


def test_a_job_that_reads_nothing_has_no_dead_letters() -> None:
    plan = planned(job(inputs=[]))
    assert plan.launch is not None
    assert plan.dead_letters is None
    assert dead_letter_log(StreamJob.model_validate(job(inputs=[]))) is None


def test_the_log_the_dead_letters_belong_to_takes_them_along_under_delete() -> None:
    jobs = [StreamJob.model_validate(job())]
    assert deleted_topics(a_log("enriched", deletionPolicy="Delete"), "enriched", jobs) == (
        "enriched",
        TOPIC,
    )
    # Not the job's first output, another namespace's job, or a Log kept under Retain.
    assert deleted_topics(a_log("clicks", deletionPolicy="Delete"), "clicks", jobs) == ("clicks",)
    elsewhere = job()
    elsewhere["metadata"] = {**elsewhere["metadata"], "namespace": "other"}
    others = [StreamJob.model_validate(elsewhere)]
    assert deleted_topics(a_log("enriched", deletionPolicy="Delete"), "enriched", others) == (
        "enriched",
    )
    assert deleted_topics(a_log("enriched"), "enriched", jobs) == ()


def test_status_shows_the_count_the_job_last_reported() -> None:
    seen = RunObservation("enrich-job-r1", RUNNING, progress={"batchId": 3, "deadLetters": 4})
    status = job_status(planned(job()), seen, None, 1, NOW)
    assert status["deadLetters"] == 4


def test_the_count_stays_while_the_job_reports_nothing_and_goes_with_a_new_revision() -> None:
    before = {**running(job()), "deadLetters": 4}
    quiet = RunObservation("enrich-job-r1", RUNNING)
    assert job_status(planned(job(), before), quiet, before, 2, NOW)["deadLetters"] == 4
    reprocess = job(upgrade={"strategy": "Reprocess"}, image="registry/enrich:2")
    plan = planned(reprocess, before)
    assert plan.revision == 2
    assert "deadLetters" not in job_status(plan, quiet, before, 2, NOW)
