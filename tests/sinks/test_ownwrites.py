"""OwnWrites: a watch's read that began while a write was in flight, or before one started,
raced it; a read after the write ended did not; each read answers once; the echo of a write
is known by its resourceVersion, the last few remembered."""

from __future__ import annotations

import threading

import pytest

from gfd.sinks.ownwrites import OWN_VERSIONS, OwnWrites, resource_version


def answer(rv: str) -> dict[str, object]:
    return {"metadata": {"name": "node-1", "resourceVersion": rv}}


def test_a_state_that_no_read_preceded_never_raced() -> None:
    own = OwnWrites()
    with own.writing():
        pass
    assert own.raced() is False  # a watch event, not a read's state


def test_a_read_begun_after_the_last_write_ended_did_not_race_it() -> None:
    own = OwnWrites()
    with own.writing():
        pass
    own.listing()
    assert own.raced() is False


def test_a_read_begun_before_a_write_started_raced_it() -> None:
    own = OwnWrites()
    own.listing()
    with own.writing():
        pass
    assert own.raced() is True


def test_a_read_begun_while_a_write_was_in_flight_raced_it_even_after_it_ended() -> None:
    own = OwnWrites()
    with own.writing():
        own.listing()
    assert own.raced() is True


def test_a_write_that_failed_still_counts_and_ends() -> None:
    own = OwnWrites()
    own.listing()
    with pytest.raises(RuntimeError), own.writing():
        raise RuntimeError("HTTP 500")
    assert own.raced() is True
    own.listing()  # the failed write is over: the next read sees the object as it is
    assert own.raced() is False


def test_each_read_answers_once_then_later_states_are_the_watchs_events() -> None:
    own = OwnWrites()
    own.listing()
    with own.writing():
        pass
    assert own.raced() is True
    assert own.raced() is False


def test_a_new_read_replaces_the_mark_of_the_one_before() -> None:
    own = OwnWrites()
    own.listing()
    with own.writing():
        pass
    own.listing()  # a read after a 410 whose state was never reported
    assert own.raced() is False


def test_a_read_on_another_thread_while_the_write_is_blocked_in_flight_raced_it() -> None:
    own = OwnWrites()
    in_flight, done = threading.Event(), threading.Event()

    def write() -> None:
        with own.writing():
            in_flight.set()
            done.wait(30)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert in_flight.wait(30)
        reader = threading.Thread(target=own.listing)
        reader.start()
        reader.join(30)
    finally:
        done.set()
        writer.join(30)
    assert own.raced() is True


def test_the_echo_of_a_write_is_known_by_its_resource_version() -> None:
    own = OwnWrites()
    own.wrote(answer("41"))
    assert own.echo(answer("41")) is True
    assert own.echo(answer("42")) is False


def test_only_the_last_writes_are_remembered() -> None:
    own = OwnWrites()
    for rv in range(OWN_VERSIONS + 1):
        own.wrote(answer(str(rv)))
    assert own.echo(answer("0")) is False
    assert own.echo(answer("1")) is True
    assert own.echo(answer(str(OWN_VERSIONS))) is True


def test_an_object_without_metadata_has_no_resource_version() -> None:
    assert resource_version({}) == ""
    assert resource_version({"metadata": {"resourceVersion": 7}}) == "7"
