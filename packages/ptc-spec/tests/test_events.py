"""EventChannel: subscribe, emit in order, unsubscribe; wanted() says whether anyone listens."""

from __future__ import annotations

from ptc_spec import EventChannel, TimedStep


def test_listeners_get_events_in_order_until_they_unsubscribe() -> None:
    channel: EventChannel[TimedStep] = EventChannel("test.steps")
    assert not channel.wanted()
    first: list[TimedStep] = []
    second: list[str] = []
    stop_first = channel.subscribe(first.append)
    channel.subscribe(lambda s: second.append(s.name))
    assert channel.wanted()
    channel.emit(TimedStep("lower", 1.0, 0.5))
    stop_first()
    stop_first()  # a second call is harmless
    channel.emit(TimedStep("build", 2.0, 0.25, kind="build", detail="disk hit"))
    assert [s.name for s in first] == ["lower"]
    assert second == ["lower", "build"]
    assert "test.steps" in repr(channel)
