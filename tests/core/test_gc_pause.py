"""One pause of the cyclic garbage collector for the process (replays, Prometheus decoding)."""

from __future__ import annotations

import gc

from diagnosis.core.gc_pause import paused_gc


def test_the_collector_runs_again_when_the_last_of_nested_pauses_ends() -> None:
    assert gc.isenabled()
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_disabled_before_a_pause_stays_disabled() -> None:
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_pauses_overlapping_from_the_replay_and_the_decoder_share_one_count() -> None:
    from diagnosis.core.simulate import replay  # noqa: PLC0415 -- both use this module's pause
    from diagnosis.edge.sources.prometheus import wire  # noqa: PLC0415

    assert replay.paused_gc is wire.paused_gc is paused_gc
