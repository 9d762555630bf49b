"""The runner spec: derived names, positions, streaming defaults, Kafka options, local runs."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from distributary import jvm_operators
from distributary.api.common import Position, SparkSettings
from distributary.api.log import Log, LogStatus
from distributary.api.view import DerivedView
from distributary.plan.applications.runner_spec import (
    EXACTLY_ONCE_BATCH,
    LOCAL_CHECKPOINT_FILES,
    ROCKSDB_PROVIDER,
    SPARK_LOCAL_CHECKPOINT_FILES,
    EventTime,
    RunnerSpec,
    StartingPosition,
    checkpoint_location,
    consumer_group,
    dead_letter_topic,
    default_spark_conf,
    kafka_source_options,
    starting_position,
    view_runner_spec,
)
from distributary.plan.applications.spark import local_submit


def make_log(name: str, partitions: int = 3, **spec: Any) -> Log:
    return Log.model_validate(
        {
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"partitions": partitions, **spec},
        }
    )


def make_view(**spec: Any) -> DerivedView:
    body = {
        "inputs": [
            {"log": "orders", "alias": "o"},
            {"log": "customers", "alias": "c", "startingPosition": {"from": "Latest"}},
        ],
        "sql": "SELECT o.id, c.name FROM o JOIN c ON o.customer = c.id",
        "output": {"mode": "upsert", "key": ["id"]},
    }
    body.update(spec)
    return DerivedView.model_validate(
        {"metadata": {"name": "order-names", "namespace": "shop"}, "spec": body}
    )


def plan(view: DerivedView | None = None, output_partitions: int = 2, **kwargs: Any) -> RunnerSpec:
    inputs = {
        "o": make_log("orders", 6, schema="id STRING, customer STRING"),
        "c": make_log("customers", 4),
    }
    kwargs.setdefault("checkpoint_root", "s3a://bucket/checkpoints/")
    return view_runner_spec(
        view or make_view(),
        inputs,
        make_log("order-names", output_partitions),
        revision=2,
        spec_hash="abc123",
        output_topic="shop.order-names.r2",
        **kwargs,
    )


# --- names --------------------------------------------------------------------------------------


def test_names_follow_namespace_name_and_revision() -> None:
    assert consumer_group("shop", "counts", 3) == "distributary.shop.counts.r3"
    assert dead_letter_topic("shop", "counts") == "distributary.shop.counts.dlq"
    assert checkpoint_location("/data/ckpt/", "shop", "counts", 3) == "/data/ckpt/shop/counts/r3"


def test_a_dead_letter_topic_too_long_for_kafka_is_shortened_deterministically() -> None:
    name = "v" * 240
    topic = dead_letter_topic("shop", name)
    assert len(topic) <= 249
    assert topic.endswith(".dlq")
    assert topic == dead_letter_topic("shop", name)
    assert topic != dead_letter_topic("shop", "w" + name[1:])


# --- the view's spec --------------------------------------------------------------------------


def test_view_runner_spec_carries_inputs_sql_output_and_derived_names() -> None:
    spec = plan()
    assert (spec.kind, spec.namespace, spec.name, spec.revision, spec.spec_hash) == (
        "DerivedView",
        "shop",
        "order-names",
        2,
        "abc123",
    )
    orders, customers = spec.inputs
    assert (orders.alias, orders.log, orders.topic, orders.partitions) == (
        "o",
        "orders",
        "orders",
        6,
    )
    assert orders.schema_ddl == "id STRING, customer STRING"
    assert orders.format == "json"
    assert orders.starting_position == StartingPosition(kind="earliest")
    assert customers.schema_ddl is None
    assert customers.starting_position == StartingPosition(kind="latest")
    assert spec.sql == "SELECT o.id, c.name FROM o JOIN c ON o.customer = c.id"
    assert spec.output is not None
    assert (spec.output.topic, spec.output.mode, spec.output.key, spec.output.partitions) == (
        "shop.order-names.r2",
        "upsert",
        ("id",),
        2,
    )
    assert spec.dead_letter_topic == "distributary.shop.order-names.dlq"
    assert spec.consumer_group == "distributary.shop.order-names.r2"
    assert spec.checkpoint_location == "s3a://bucket/checkpoints/shop/order-names/r2"
    assert spec.trigger == "5s"
    assert spec.fail_on_data_loss is True
    assert spec.bootstrap_servers is None


def test_an_input_is_read_from_the_topic_its_log_status_serves() -> None:
    serving = make_log("orders", 6)
    serving.status = LogStatus(topic_name="shop.orders.r4", partitions=8)
    spec = view_runner_spec(
        make_view(
            inputs=[{"log": "orders", "alias": "o"}],
            sql="SELECT * FROM o",
            output={"mode": "append"},
        ),
        {"o": serving},
        make_log("order-names", 2),
        revision=1,
        spec_hash="h",
        output_topic="t",
        checkpoint_root="/c",
    )
    assert (spec.inputs[0].topic, spec.inputs[0].partitions) == ("shop.orders.r4", 8)
    assert spec.output is not None
    assert spec.output.key is None


def test_a_missing_input_log_names_the_view_the_alias_and_the_fix() -> None:
    with pytest.raises(
        ValueError, match=r"DerivedView/shop/order-names.*alias 'c'.*create the Log"
    ):
        view_runner_spec(
            make_view(),
            {"o": make_log("orders")},
            make_log("order-names"),
            revision=1,
            spec_hash="h",
            output_topic="t",
            checkpoint_root="/c",
        )


def test_starting_positions_can_be_overridden_per_alias() -> None:
    committed = StartingPosition(kind="offsets", offsets={0: 10, 1: 20})
    spec = plan(starting_positions={"o": committed})
    assert spec.inputs[0].starting_position == committed
    assert spec.inputs[1].starting_position == StartingPosition(kind="latest")


def test_allowing_partial_history_turns_off_fail_on_data_loss() -> None:
    spec = plan(make_view(upgrade={"allowPartialHistory": True}))
    assert spec.fail_on_data_loss is False


def test_the_spec_round_trips_through_json() -> None:
    spec = plan(bootstrap_servers="kafka:9092")
    assert RunnerSpec.model_validate_json(spec.model_dump_json()) == spec
    assert json.loads(spec.model_dump_json())["version"] == 1


def test_an_inputs_watermark_reaches_the_runner_with_its_delay_in_milliseconds() -> None:
    view = make_view()
    watermarked = [
        {"log": "orders", "alias": "o", "watermark": {"column": "placed_at", "delay": "2m"}},
        view.spec.inputs[1].to_yaml_dict(),
    ]
    spec = plan(make_view(inputs=watermarked))
    assert spec.inputs[0].watermark == EventTime(column="placed_at", delay_ms=120_000)
    assert spec.inputs[1].watermark is None
    assert RunnerSpec.model_validate_json(spec.model_dump_json()) == spec


def test_an_input_without_a_watermark_is_written_as_before() -> None:
    # A view's runner spec is its application's argument: no new key, no restart on upgrade.
    written = json.loads(plan().model_dump_json())
    assert all("watermark" not in source for source in written["inputs"])


# --- streaming defaults ---------------------------------------------------------------------


def test_shuffle_partitions_follow_the_largest_input_not_200() -> None:
    assert plan(output_partitions=2).spark_conf["spark.sql.shuffle.partitions"] == "6"


def test_shuffle_partitions_follow_the_output_when_it_is_larger() -> None:
    assert plan(output_partitions=12).spark_conf["spark.sql.shuffle.partitions"] == "12"


def test_streaming_defaults_use_rocksdb_state_and_utc() -> None:
    conf = plan().spark_conf
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert default_spark_conf(5)["spark.sql.shuffle.partitions"] == "5"


def test_checkpoints_on_local_files_are_written_through_the_file_system_api() -> None:
    key = "spark.sql.streaming.checkpointFileManagerClass"
    assert key not in plan().spark_conf  # s3a://: Spark's own choice
    for root in ("file:///var/lib/distributary/checkpoints", "/home/me/.distributary/checkpoints"):
        assert plan(checkpoint_root=root).spark_conf[key] == LOCAL_CHECKPOINT_FILES
    assert key not in default_spark_conf(3)
    assert key not in default_spark_conf(3, "hdfs://namenode/checkpoints/a/b/r1")


def test_the_local_checkpoint_file_managers_are_classes_of_ours_and_of_the_pinned_spark() -> None:
    """Spark's class is named by its package, which moves between Spark versions; ours is among
    the JVM operators' sources (compiled into their jar), and hands Spark's all but the making
    of files and folders."""
    jars = pytest.importorskip("pyspark").__file__
    found = []
    for jar in (Path(jars).parent / "jars").glob("spark-sql_*.jar"):
        with zipfile.ZipFile(jar) as archive:
            found += [n for n in archive.namelist() if n.endswith("CheckpointFileManager.class")]
    assert SPARK_LOCAL_CHECKPOINT_FILES.replace(".", "/") + ".class" in found
    package, name = LOCAL_CHECKPOINT_FILES.rsplit(".", 1)
    [source] = [p for p in jvm_operators.sources() if p.stem == name]
    text = source.read_text()
    assert f"package {package};" in text
    assert f'"{SPARK_LOCAL_CHECKPOINT_FILES}"' in text  # the manager it hands the rest to


def test_the_users_spark_conf_wins_over_the_defaults() -> None:
    view = make_view(
        spark={
            "sparkConf": {
                "spark.sql.shuffle.partitions": "64",
                "spark.sql.session.timeZone": "Europe/Paris",
                "spark.executor.extraJavaOptions": "-XX:+UseG1GC",
            },
            "trigger": "1m",
            "maxOffsetsPerTrigger": 5000,
        }
    )
    spec = plan(view)
    assert spec.spark_conf["spark.sql.shuffle.partitions"] == "64"
    assert spec.spark_conf["spark.sql.session.timeZone"] == "Europe/Paris"
    assert spec.spark_conf["spark.executor.extraJavaOptions"] == "-XX:+UseG1GC"
    assert spec.spark_conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert (spec.trigger, spec.max_offsets_per_trigger) == ("1m", 5000)


# --- starting positions and Kafka source options ----------------------------------------------


def test_a_timestamp_position_becomes_epoch_milliseconds() -> None:
    position = Position.model_validate({"from": "Timestamp", "timestamp": "2024-05-01T00:00:01Z"})
    assert starting_position(position) == StartingPosition(
        kind="timestamp", timestamp_ms=1714521601000
    )


def test_a_timestamp_that_is_not_rfc3339_is_refused_with_an_example() -> None:
    position = Position.model_validate({"from": "Timestamp", "timestamp": "yesterday"})
    with pytest.raises(ValueError, match=r"startingPosition\.timestamp 'yesterday'.*2024-05-01"):
        starting_position(position)


def test_an_offsets_position_keys_partitions_by_number() -> None:
    position = Position.model_validate({"from": "Offsets", "offsets": {"1": 17, "0": 42}})
    assert starting_position(position) == StartingPosition(kind="offsets", offsets={0: 42, 1: 17})


def test_kafka_options_for_the_earliest_position() -> None:
    spec = plan(bootstrap_servers="kafka:9092")
    assert kafka_source_options(spec, spec.inputs[0]) == {
        "subscribe": "orders",
        "kafka.bootstrap.servers": "kafka:9092",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "kafka.isolation.level": "read_committed",
        "maxOffsetsPerTrigger": str(EXACTLY_ONCE_BATCH),
        "groupIdPrefix": "distributary.shop.order-names.r2.spark",
    }


def test_an_at_least_once_view_reads_committed_records_in_unbounded_batches() -> None:
    spec = plan(make_view(output={"mode": "upsert", "key": ["id"], "delivery": "AtLeastOnce"}))
    assert spec.output is not None
    assert spec.output.delivery == "AtLeastOnce"
    options = kafka_source_options(spec, spec.inputs[0])
    assert options["kafka.isolation.level"] == "read_committed"
    assert "maxOffsetsPerTrigger" not in options


def test_a_view_is_exactly_once_unless_its_output_says_otherwise() -> None:
    spec = plan()
    assert spec.output is not None
    assert spec.output.delivery == "ExactlyOnce"


def test_kafka_options_for_the_latest_position_and_a_batch_limit() -> None:
    spec = plan(make_view(spark={"maxOffsetsPerTrigger": 1000}))
    options = kafka_source_options(spec, spec.inputs[1])
    assert options["startingOffsets"] == "latest"
    assert options["maxOffsetsPerTrigger"] == "1000"
    assert "kafka.bootstrap.servers" not in options


def test_kafka_options_for_a_timestamp_start_at_the_end_when_it_is_in_the_future() -> None:
    spec = plan(starting_positions={"o": StartingPosition(kind="timestamp", timestamp_ms=99)})
    options = kafka_source_options(spec, spec.inputs[0])
    assert options["startingTimestamp"] == "99"
    assert options["startingOffsetsByTimestampStrategy"] == "latest"
    assert "startingOffsets" not in options


def test_kafka_options_for_offsets_name_every_partition_with_earliest_for_the_rest() -> None:
    spec = plan(starting_positions={"o": StartingPosition(kind="offsets", offsets={1: 7, 4: 9})})
    options = kafka_source_options(spec, spec.inputs[0])
    assert json.loads(options["startingOffsets"]) == {
        "orders": {"0": -2, "1": 7, "2": -2, "3": -2, "4": 9, "5": -2}
    }


def test_kafka_options_allow_data_loss_with_partial_history() -> None:
    spec = plan(make_view(upgrade={"allowPartialHistory": True}))
    assert kafka_source_options(spec, spec.inputs[0])["failOnDataLoss"] == "false"


# --- the local runtime -------------------------------------------------------------------------


def test_local_submit_runs_the_runner_file_on_the_spec_file() -> None:
    spec = plan()
    settings = SparkSettings.model_validate(
        {"driver": {"memory": "2g"}, "executor": {"cores": 1, "instances": 2}}
    )
    command = local_submit(
        spec,
        settings,
        spec_path="/tmp/spec.json",
        runner_file="/venv/distributary/runner/__main__.py",
        python="/venv/bin/python",
        jars=["/cache/a.jar", "/cache/b.jar"],
    )
    argv = list(command.argv)
    assert argv[:7] == [
        "spark-submit",
        "--master",
        "local[2]",
        "--name",
        "order-names-r2",
        "--driver-memory",
        "2g",
    ]
    assert argv[-3:] == ["/venv/distributary/runner/__main__.py", "--spec", "/tmp/spec.json"]
    assert argv[argv.index("--jars") + 1] == "/cache/a.jar,/cache/b.jar"
    confs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"]
    assert "spark.sql.shuffle.partitions=6" in confs
    assert len(confs) == len(spec.spark_conf)
    assert command.env == {
        "PYSPARK_PYTHON": "/venv/bin/python",
        "PYSPARK_DRIVER_PYTHON": "/venv/bin/python",
    }


def test_local_submit_caps_the_local_threads() -> None:
    settings = SparkSettings.model_validate({"executor": {"cores": 4, "instances": 8}})
    command = local_submit(plan(), settings, spec_path="s", runner_file="r")
    assert command.argv[2] == "local[4]"
    assert "--jars" not in command.argv
    capped = local_submit(plan(), settings, spec_path="s", runner_file="r", max_cores=16)
    assert capped.argv[2] == "local[16]"


def test_a_checkpoint_lies_under_the_resources_uid_in_a_cluster_only() -> None:
    uid = "6f1c2a9e-1d2b-4c3d-9e8f-0a1b2c3d4e5f"
    assert checkpoint_location("/ck", "shop", "counts", 2, uid) == f"/ck/shop/counts/{uid}/r2"
    # `distributary run` names its views by namespace and name: their folders stay as they were.
    assert checkpoint_location("/ck", "shop", "counts", 2, "local:shop/counts") == (
        "/ck/shop/counts/r2"
    )
