"""The Django choices of the snapshot's words say exactly what diagnosis/core/vocabulary.py says
(their values and labels also feed the migrations, so the classes stay as they are)."""

from __future__ import annotations

import pytest

from diagnosis import choices
from diagnosis.core import vocabulary


@pytest.mark.parametrize(
    ("choice", "words"),
    [
        (choices.NodeState, vocabulary.NODE_STATES),
        (choices.GpuHealth, vocabulary.GPU_HEALTH),
        (choices.JobState, vocabulary.JOB_STATES),
        (choices.SchedulerEventKind, vocabulary.EVENT_KINDS),
    ],
)
def test_choices_values_are_the_vocabulary_words(choice, words) -> None:
    assert tuple(choice.values) == words
