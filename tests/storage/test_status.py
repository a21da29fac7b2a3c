import json

import pandas as pd

from fedrun.storage.status import ENDED, Status


def test_a_status_is_the_word_summary_json_holds():
    assert Status.COMPLETED == "completed"
    assert json.dumps({"status": Status.DIVERGED}) == '{"status": "diverged"}'
    assert str(Status.FAILED) == "failed" and f"{Status.RUNNING}" == "running"
    frame = pd.DataFrame({"status": ["completed", "failed"]})
    assert list(frame["status"] == Status.COMPLETED) == [True, False]


def test_parse_takes_only_the_five_words():
    assert Status.parse("interrupted") is Status.INTERRUPTED
    assert Status.parse("Completed") is None and Status.parse(None) is None and Status.parse(3) is None


def test_every_status_but_running_has_ended():
    assert Status.RUNNING not in ENDED and set(ENDED) == set(Status) - {Status.RUNNING}


def test_a_status_keys_a_mapping_as_its_word_does():
    assert {Status.COMPLETED: "FINISHED"}.get("completed") == "FINISHED"
    assert "diverged" in {Status.DIVERGED} and hash(Status.FAILED) == hash("failed")
