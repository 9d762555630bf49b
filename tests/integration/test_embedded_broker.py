"""The embedded broker: it serves, keeps its data across restarts, and refuses a second owner."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from distributary.kafka.cluster import client_config, cluster_ready
from distributary.local.broker import BrokerError, EmbeddedBroker


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient(client_config(bootstrap))
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(client_config(bootstrap, **{"group.id": "probe"}))
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_the_broker_serves_topics_and_records(broker: EmbeddedBroker) -> None:
    assert cluster_ready(broker.bootstrap_servers)
    _create(broker.bootstrap_servers, "serves", 2)
    producer = Producer(client_config(broker.bootstrap_servers))
    for i in range(10):
        producer.produce("serves", value=f'{{"n": {i}}}'.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    assert _end_offsets(broker.bootstrap_servers, "serves", 2) == [5, 5]


def test_a_restarted_broker_keeps_its_records(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "state")
    with broker:
        _create(broker.bootstrap_servers, "kept", 1)
        producer = Producer(client_config(broker.bootstrap_servers))
        for i in range(3):
            producer.produce("kept", value=str(i).encode())
        assert producer.flush(30) == 0
    assert not cluster_ready(broker.bootstrap_servers, timeout=1)
    with broker:
        assert _end_offsets(broker.bootstrap_servers, "kept", 1) == [3]


def test_a_second_broker_on_the_same_state_is_refused(broker: EmbeddedBroker) -> None:
    with pytest.raises(BrokerError, match="already using"):
        EmbeddedBroker(broker.state_dir).start()


def test_the_broker_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A killed test run or `distributary run` (SIGKILL: no clean-up) leaves no broker behind."""
    state = tmp_path / "orphan"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from distributary.local.broker import EmbeddedBroker\n"
        f"EmbeddedBroker(Path({str(state)!r})).start()\n"
        "print('serving', flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "serving"
        broker_pid = int((state / "broker.pid").read_text())
        assert Path(f"/proc/{broker_pid}").exists()
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    deadline = time.monotonic() + 60
    while Path(f"/proc/{broker_pid}").exists() and time.monotonic() < deadline:
        alive = Path(f"/proc/{broker_pid}/stat").read_text().split()[2] != "Z"
        if not alive:
            break
        time.sleep(0.5)
    stat = Path(f"/proc/{broker_pid}/stat")
    assert not stat.exists() or stat.read_text().split()[2] == "Z", "the broker outlived its parent"


def test_the_suites_brokers_map_the_class_archive_of_kafkas_classes(
    broker: EmbeddedBroker, kafka_class_archive: Path | None
) -> None:
    """The archive the suite makes (`devtools.kafka_cds`) fits the brokers it starts: a JVM
    that finds it does not fit goes on without it, silently, and only slower."""
    assert kafka_class_archive is not None, "the archive of Kafka's classes could not be made"
    pid = int((broker.state_dir / "broker.pid").read_text())
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(kafka_class_archive) in maps


def test_a_port_taken_between_its_choice_and_the_brokers_bind_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Free ports are chosen before Kafka binds them, and the machine's other programs choose
    theirs meanwhile: a broker that finds its port taken starts again on new ports."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        choose = EmbeddedBroker._choose_ports
        choices = []

        def choose_a_taken_port_first(self: EmbeddedBroker) -> None:
            choose(self)
            if not choices:
                self.port = taken.getsockname()[1]
            choices.append(self.port)

        monkeypatch.setattr(EmbeddedBroker, "_choose_ports", choose_a_taken_port_first)
        with EmbeddedBroker(tmp_path / "kafka") as running:
            assert choices[0] == taken.getsockname()[1]
            assert running.port == choices[-1] != choices[0]
            assert cluster_ready(running.bootstrap_servers)
    said = (tmp_path / "kafka" / "broker.log").read_text()
    assert "Address already in use" in said
