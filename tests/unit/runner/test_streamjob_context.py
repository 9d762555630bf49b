"""A StreamJob's context from the environment the operator gives it, and the tracker's ranges.

No Spark runs here: these are the parts of `distributary.streamjob` that decide names and ranges.
"""

from __future__ import annotations

import json

import pytest

from distributary.plan.applications.runner_spec import RunnerInput, RunnerOutput
from distributary.streamjob import StreamJobContext, StreamJobError
from distributary.streamjob.tracker import _at_most, scan_spec

CLICKS = RunnerInput(alias=None, log="clicks", topic="clicks", partitions=2, schema_ddl="n INT")
OUT = RunnerOutput(log="out", topic="out", mode="append", partitions=1)


def environment(**more: str) -> dict[str, str]:
    return {
        "DISTRIBUTARY_NAMESPACE": "shop",
        "DISTRIBUTARY_NAME": "enrich",
        "DISTRIBUTARY_REVISION": "3",
        "DISTRIBUTARY_BOOTSTRAP_SERVERS": "kafka:9092",
        "DISTRIBUTARY_CHECKPOINT_LOCATION": "s3a://ck/shop/enrich/r3",
        "DISTRIBUTARY_CONSUMER_GROUP": "distributary.shop.enrich.r3",
        "DISTRIBUTARY_INPUTS": json.dumps([CLICKS.model_dump(mode="json")]),
        "DISTRIBUTARY_OUTPUTS": json.dumps([OUT.model_dump(mode="json")]),
        **more,
    }


def test_the_dead_letter_topic_is_the_one_the_operator_names() -> None:
    given = environment(DISTRIBUTARY_DEAD_LETTER_TOPIC="distributary.shop.enrich.dlq")
    assert (
        StreamJobContext.from_environment(given).dead_letters_to == "distributary.shop.enrich.dlq"
    )
    # A job started by an operator that did not say: the same name, derived.
    unsaid = StreamJobContext.from_environment(environment())
    assert unsaid.dead_letters_to == "distributary.shop.enrich.dlq"


def test_a_missing_fact_names_the_variable() -> None:
    given = environment()
    del given["DISTRIBUTARY_CONSUMER_GROUP"]
    with pytest.raises(StreamJobError, match="DISTRIBUTARY_CONSUMER_GROUP is not set"):
        StreamJobContext.from_environment(given)


def test_dead_letters_are_scanned_as_the_jobs_with_its_headers() -> None:
    job = StreamJobContext.from_environment(environment())
    spec = scan_spec(job, (CLICKS,))
    assert (spec.kind, spec.namespace, spec.name, spec.revision) == (
        "StreamJob",
        "shop",
        "enrich",
        3,
    )
    assert spec.dead_letter_topic == "distributary.shop.enrich.dlq"
    assert spec.inputs == (CLICKS,)


def test_a_range_never_starts_past_its_end() -> None:
    start = {"clicks": {0: 10, 1: 4}}
    end = {"clicks": {0: 7, 1: 9}}
    assert _at_most(start, end) == {"clicks": {0: 7, 1: 4}}
