"""The `StreamJob` kind: a user's own PySpark streaming application, run and tracked like a view.

The operator does not read the job's code; it injects where to read and write (bootstrap servers,
topics, checkpoint, consumer group) and follows the job's position through its consumer group.
`inputs` and `outputs` name logs so that the pipeline graph knows the job's place in it.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from distributary.api.common import (
    GROUP_VERSION,
    HANDLED_SPEC,
    ApiModel,
    Change,
    Conditions,
    InputPosition,
    KubeName,
    ObjectMeta,
    PendingAction,
    Position,
    Progress,
    SparkApplicationRef,
    SparkSettings,
    StatusModel,
    cel,
    validations,
)
from distributary.api.view import DeadLetters, RewindRequest, RewindStatus

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class JobInput(ApiModel):
    """A log the job reads."""

    log: KubeName = Field(description="The name of a Log in the same namespace.")
    starting_position: Position = Field(
        default_factory=Position,
        description="Where to start when there is no checkpoint and no committed offset.",
    )


class JobOutput(ApiModel):
    """A log the job writes: it must be declared as a Log and have no other writer."""

    log: KubeName = Field(description="The name of a Log in the same namespace.")


class JobUpgrade(ApiModel):
    """What happens when the job's code or inputs change."""

    strategy: Literal["InPlace", "Reprocess"] = Field(
        default="InPlace",
        description="InPlace: restart from the checkpoint (the job's author keeps it compatible). "
        "Reprocess: start again from the inputs' starting positions on a fresh checkpoint.",
    )


class JobRewind(RewindRequest):
    """A request to move the job's position: carried out once per `requestId`."""

    inputs: list[KubeName] = Field(
        default_factory=list,
        max_length=16,
        description="The input logs to rewind; empty: every input.",
    )


class JobSpec(ApiModel):
    """The application to run, what it reads and writes, and how Spark runs it."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.rewind) || !has(self.rewind.inputs) || "
                "self.rewind.inputs.all(l, has(self.inputs) && self.inputs.exists(i, i.log == l))",
                "rewind.inputs names logs the job reads",
                field_path=".rewind",
            ),
        )
    )

    image: Annotated[str, StringConstraints(min_length=1, max_length=512)] = Field(
        description="The container image with the application and its dependencies."
    )
    main_application_file: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description="The Python file to run, e.g. local:///app/job.py."
    )
    arguments: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=128, description="Arguments passed to the application."
    )
    env: dict[str, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=128,
        description="Extra environment variables for the driver and executors.",
        json_schema_extra=validations(
            cel(
                "self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && "
                "!k.startsWith('DISTRIBUTARY_'))",
                "env names are letters, digits and '_', and may not start with DISTRIBUTARY_ "
                "(the operator sets those)",
            ),
        ),
    )
    inputs: list[JobInput] = Field(
        default_factory=list, max_length=16, description="The logs the job reads."
    )
    outputs: list[JobOutput] = Field(
        default_factory=list, max_length=16, description="The logs the job writes."
    )
    upgrade: JobUpgrade = Field(default_factory=JobUpgrade, description="How edits are rolled out.")
    spark: SparkSettings = Field(
        default_factory=SparkSettings, description="How the Spark application runs."
    )
    dead_letters: DeadLetters = Field(
        default_factory=DeadLetters,
        description="The dead-letter topic `distributary.<namespace>.<name>.dlq`, where the "
        "records `distributary.streamjob`'s `read_json` cannot parse go (shared by the job's "
        "revisions; its name is in the job's environment as DISTRIBUTARY_DEAD_LETTER_TOPIC).",
    )
    rewind: JobRewind | None = Field(
        default=None,
        description="Move the job's position (a new requestId each time): the operator stops "
        "it, sets its consumer group's offsets and starts it again on a fresh checkpoint; the "
        "job starts from the group's offsets when it reads through distributary.streamjob.",
    )
    suspend: bool = Field(
        default=False,
        description="Stop the job's Spark application, keeping its position, checkpoint and "
        "outputs (true), or start it again where it stopped (false). Edits made meanwhile are "
        "carried out on resume.",
    )

    @model_validator(mode="after")
    def _check_logs(self) -> JobSpec:
        for field, names in (
            ("inputs", [i.log for i in self.inputs]),
            ("outputs", [o.log for o in self.outputs]),
        ):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{field}: log {twice[0]!r} is named twice; name it once")
        if self.rewind is not None:
            unknown = sorted(set(self.rewind.inputs) - {i.log for i in self.inputs})
            if unknown:
                raise ValueError(
                    f"rewind.inputs: {unknown[0]!r} is not an input of the job; name one of "
                    f"{', '.join(i.log for i in self.inputs) or 'its inputs'} (or none: all)"
                )
        for name in self.env:
            if re.fullmatch(ENV_NAME_PATTERN, name) is None:
                raise ValueError(f"env: {name!r} is not a valid environment variable name")
            if name.startswith("DISTRIBUTARY_"):
                raise ValueError(
                    f"env: {name!r} starts with DISTRIBUTARY_, which the operator sets itself; "
                    "choose another name"
                )
        return self


class JobStatus(StatusModel):
    """The job as last observed."""

    conditions: Conditions
    observed_generation: int | None = Field(default=None, description="The generation observed.")
    handled_spec: str | None = Field(default=None, description=HANDLED_SPEC)
    revision: int | None = Field(default=None, description="The running revision.")
    spec_hash: str | None = Field(default=None, description="Hash of the running revision's spec.")
    consumer_group: str | None = Field(
        default=None, description="The consumer group it reports its position in."
    )
    inputs: list[InputPosition] = Field(default_factory=list, description="Position per input.")
    lag: int | None = Field(default=None, description="Total lag over the inputs.")
    dead_letters: int | None = Field(
        default=None,
        description="Input records the running revision could not parse and sent to the "
        "dead-letter topic, over its whole run (as the job last reported; it survives restarts).",
    )
    last_progress: Progress | None = Field(default=None, description="The last micro-batch.")
    spark_application: SparkApplicationRef | None = Field(
        default=None, description="The Spark application."
    )
    last_change: Change | None = Field(
        default=None, description="How the last edit was classified."
    )
    last_rewind: RewindStatus | None = Field(default=None, description="The last rewind.")
    pending_action: PendingAction | None = Field(
        default=None, description="What the operator is doing now."
    )


class StreamJob(ApiModel):
    """A user's own PySpark streaming application over logs."""

    api_version: Literal["distributary.dev/v1alpha1"] = Field(default=GROUP_VERSION)
    kind: Literal["StreamJob"] = "StreamJob"
    metadata: ObjectMeta
    spec: JobSpec
    status: JobStatus | None = None
