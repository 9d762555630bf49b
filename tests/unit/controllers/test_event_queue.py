"""The operator's events go through a queue of their own: a reconcile never waits for them, they
never take the threads reconciles wait with, a flood of them is bounded, and Normal events wait
while reconciles run (warnings do not)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from distributary.controllers import events
from distributary.controllers.events import EventQueue, KubeEvents


def test_events_are_posted_on_their_own_threads_not_the_event_loops_pool() -> None:
    posted: list[tuple[str, str]] = []
    done = threading.Event()

    class Kube:
        def create(self, manifest: dict[str, Any]) -> None:
            posted.append((manifest["reason"], threading.current_thread().name))
            done.set()

    body = {"kind": "Log", "metadata": {"namespace": "ns", "name": "clicks", "uid": "u-1"}}

    async def reconcile() -> None:
        loop = asyncio.get_running_loop()
        blocked = threading.Event()
        # Every thread of the loop's own pool is held, as reconciles waiting on the API hold them.
        held = [loop.run_in_executor(None, blocked.wait) for _ in range(64)]
        KubeEvents(Kube(), body).info("TopicCreated", "Created topic clicks.")  # type: ignore[arg-type]
        for _ in range(500):  # not through the held pool: polled on the loop
            if done.is_set():
                break
            await asyncio.sleep(0.01)
        blocked.set()
        await asyncio.gather(*held)

    asyncio.run(reconcile())
    assert done.is_set(), "the event waited for the threads reconciles hold"
    assert len(posted) == 1
    reason, thread = posted[0]
    assert reason == "TopicCreated"
    assert thread.startswith("events")


def test_a_flood_of_events_is_bounded_and_the_drops_are_counted() -> None:
    queue = EventQueue(senders=1, queued=3)
    release, sent = threading.Event(), []

    def slow(n: int) -> Any:
        return lambda: (release.wait(5), sent.append(n))

    taken = [queue.submit(slow(n), f"event {n}") for n in range(5)]
    assert taken == [True, True, True, False, False]
    assert queue.dropped == 2
    release.set()
    assert queue.drain(5)
    assert sent == [0, 1, 2]  # one sender: in the order given


def test_a_failing_send_frees_its_place_in_the_queue() -> None:
    queue = EventQueue(senders=1, queued=1)

    def boom() -> None:
        raise OSError("connection refused")

    assert queue.submit(boom, "first")
    for _ in range(100):
        if queue._waiting == 0:
            break
        threading.Event().wait(0.01)
    assert queue._waiting == 0
    assert queue.submit(lambda: None, "second")
    assert events.QUEUED >= 100  # the operator's bound is not a handful


def test_normal_events_wait_while_reconciles_run_and_warnings_do_not() -> None:
    busy = threading.Event()
    busy.set()
    queue = EventQueue(senders=1, queued=10, busy=busy.is_set, patience=30)
    sent: list[str] = []
    queue.submit(lambda: sent.append("made topic"), "normal", urgent=False)
    queue.submit(lambda: sent.append("refused"), "warning")
    assert not queue.drain(0.6)  # the warning went; the Normal event waits for the reconciles
    assert sent == ["refused"]
    busy.clear()
    assert queue.drain(5)
    assert sent == ["refused", "made topic"]


def test_a_normal_event_waits_its_patience_at_most() -> None:
    queue = EventQueue(senders=1, queued=10, busy=lambda: True, patience=0.3)
    sent: list[str] = []
    queue.submit(lambda: sent.append("started revision"), "normal", urgent=False)
    assert queue.drain(5)  # reconciles never stop running here: posted after 0.3 s all the same
    assert sent == ["started revision"]


def test_the_operators_queue_waits_for_its_reconciles(monkeypatch: pytest.MonkeyPatch) -> None:
    from distributary.controllers import metrics

    assert not metrics.reconciles_running()
    with metrics.reconciling("Log"):
        assert metrics.reconciles_running()
    assert not metrics.reconciles_running()
    assert events._QUEUE._busy is metrics.reconciles_running
    posted: list[tuple[str, bool]] = []

    def recorded(send: Any, what: str, urgent: bool = True) -> bool:
        posted.append((what.split(" ")[0], urgent))
        return True

    class Kube:
        def create(self, manifest: dict[str, Any]) -> None:
            raise AssertionError("queued, not sent")

    body = {"kind": "Log", "metadata": {"namespace": "ns", "name": "clicks", "uid": "u-1"}}

    async def reconcile() -> None:
        KubeEvents(Kube(), body).info("CreateTopic", "Topic clicks: created.")  # type: ignore[arg-type]
        KubeEvents(Kube(), body).warn("TopicTaken", "Topic clicks is taken.")  # type: ignore[arg-type]

    monkeypatch.setattr(events._QUEUE, "submit", recorded)
    asyncio.run(reconcile())
    assert posted == [("CreateTopic", False), ("TopicTaken", True)]
