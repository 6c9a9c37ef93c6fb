"""The finding lifecycle state machine (pure): pending → firing → resolved."""

from datetime import UTC, datetime, timedelta

from diagnosis.core.lifecycle import FIRING, PENDING, RESOLVED, advance

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def run(hits: list[bool], *, for_s: float = 300, keep_s: float = 300, step_min: float = 1):
    """Evaluate one subject once a minute; return the transitions and the final state."""
    tracked, transitions = None, []
    for i, hit in enumerate(hits):
        step = advance(
            tracked, hit=hit, as_of=at(i * step_min), for_s=for_s, keep_firing_for_s=keep_s
        )
        if step is None:
            continue
        tracked = step.tracked
        if step.changed:
            transitions.append((i, step.from_state, step.to_state))
    return transitions, tracked


def test_first_hit_is_pending_when_the_rule_has_a_for():
    transitions, tracked = run([True])
    assert transitions == [(0, None, PENDING)]
    assert tracked.state == PENDING


def test_fires_once_the_for_duration_has_passed():
    transitions, tracked = run([True] * 6, for_s=300)
    assert transitions == [(0, None, PENDING), (5, PENDING, FIRING)]
    assert tracked.firing_since == at(5)


def test_does_not_fire_one_evaluation_before_the_for_duration():
    transitions, _ = run([True] * 5, for_s=300)
    assert (4, PENDING, FIRING) not in transitions
    assert transitions[-1] == (0, None, PENDING)


def test_rule_without_for_fires_at_once():
    transitions, _ = run([True], for_s=0)
    assert transitions == [(0, None, FIRING)]


def test_pending_finding_that_stops_is_resolved_at_once():
    transitions, tracked = run([True, True, False], for_s=300)
    assert transitions[-1] == (2, PENDING, RESOLVED)
    assert tracked.state == RESOLVED


def test_firing_finding_keeps_firing_for_its_keep_duration():
    hits = [True] + [False] * 4
    transitions, tracked = run(hits, for_s=0, keep_s=300)
    assert transitions == [(0, None, FIRING)]
    assert tracked.state == FIRING


def test_firing_finding_resolves_after_keep_firing_for_without_a_hit():
    hits = [True] + [False] * 5
    transitions, tracked = run(hits, for_s=0, keep_s=300)
    assert transitions[-1] == (5, FIRING, RESOLVED)
    assert tracked.resolved_at == at(5)


def test_a_hit_resets_the_keep_firing_clock():
    hits = [True, False, False, False, True, False, False, False, False]
    transitions, tracked = run(hits, for_s=0, keep_s=300)
    assert transitions == [(0, None, FIRING)]
    assert tracked.last_hit_at == at(4)


def test_resolved_finding_reopens_as_a_new_episode():
    hits = [True, False, True]
    transitions, tracked = run(hits, for_s=0, keep_s=60)
    assert transitions == [(0, None, FIRING), (1, FIRING, RESOLVED), (2, RESOLVED, FIRING)]
    assert tracked.active_since == at(2)


def test_re_evaluating_the_same_time_changes_nothing():
    step = advance(None, hit=True, as_of=T0, for_s=0, keep_firing_for_s=60)
    again = advance(step.tracked, hit=False, as_of=T0, for_s=0, keep_firing_for_s=60)
    assert again is None


def test_no_hit_for_an_untracked_subject_stores_nothing():
    assert advance(None, hit=False, as_of=T0, for_s=0, keep_firing_for_s=60) is None
