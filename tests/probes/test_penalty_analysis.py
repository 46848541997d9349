"""The penalty probe's corruption analysis, on canned answers: one row per way an answer goes wrong."""

import json

import pytest

from prober.probes.penalty_analysis import analyse_records, edit_distance

pytestmark = pytest.mark.unit

KEYS = ["user_id", "user_name", "user_email", "created_at", "is_active", "score"]
OPTIONAL = ["score"]


def record(i, **changes):
    base = {"user_id": i, "user_name": f"user{i}", "user_email": f"user{i}@example.com",
            "created_at": "2024-01-01T00:00:00Z", "is_active": True, "score": 50}
    for key, value in changes.items():
        if value is _DROP:
            base.pop(key)
        else:
            base[key] = value
    return base


_DROP = object()


def records_json(items, indent=None):
    return json.dumps({"records": items}, indent=indent)


def renamed(i, old, new):
    return {(new if k == old else k): v for k, v in record(i).items()}


def analyse(text, n=3, finish="stop", mode="unconstrained"):
    return analyse_records(text, n, KEYS, OPTIONAL, finish, mode)


CLEAN = records_json([record(1), record(2), record(3)])

# name, text, n, finish, mode, expected attributes
CASES = [
    ("clean", CLEAN, 3, "stop", "unconstrained",
     dict(parses=True, shape_ok=True, records_delivered=3, corrupted=False, premature_stop=False,
          key_drift=False, first_corruption_index=None)),
    ("clean bare array", json.dumps([record(1), record(2)]), 2, "stop", "json_object",
     dict(parses=True, shape_ok=True, records_delivered=2, corrupted=False)),
    ("clean in a markdown fence", "```json\n" + CLEAN + "\n```", 3, "stop", "unconstrained",
     dict(parses=True, records_delivered=3, corrupted=False)),
    ("renamed key userId in the third record",
     records_json([record(1), record(2), renamed(3, "user_id", "userId")]), 3, "stop", "unconstrained",
     dict(parses=True, key_drift=True, renamed_keys=[(2, "userId", "user_id")], missing_keys=[],
          corrupted=True, first_corruption_index=2, first_corruption_kind="renamed_key")),
    ("renamed key userld (l for i)",
     records_json([record(1), renamed(2, "user_id", "userld")]), 2, "stop", "unconstrained",
     dict(renamed_keys=[(1, "userld", "user_id")], first_corruption_index=1)),
    ("an unrelated key is unexpected, the expected one missing",
     records_json([record(1), renamed(2, "created_at", "zzzzzz")]), 2, "stop", "unconstrained",
     dict(renamed_keys=[], unexpected_keys=[(1, "zzzzzz")], missing_keys=[(1, "created_at")], key_drift=True)),
    ("single quotes from the second record on",
     records_json([record(1)])[:-2] + ", {'user_id': 2, 'user_name': 'b', 'user_email': 'b@x', "
     "'created_at': 'x', 'is_active': true, 'score': 1}]}", 2, "stop", "unconstrained",
     dict(parses=False, quote_substitution=True, records_delivered=2, first_corruption_index=1,
          first_corruption_kind="quote", key_drift=False)),
    ("a smart closing quote on a key",
     '{"records": [{"user_id\u201d: 1, "user_name": "a", "user_email": "a@x", "created_at": "x", '
     '"is_active": true, "score": 1}]}', 1, "stop", "unconstrained",
     dict(parses=False, quote_substitution=True, records_delivered=1, key_drift=False,
          first_corruption_index=0)),
    ("stopped early with the array closed", records_json([record(1), record(2)]), 5, "stop", "unconstrained",
     dict(parses=True, records_delivered=2, premature_stop=True, truncated=False, unclosed=False,
          first_corruption_index=2, first_corruption_kind="premature_stop")),
    ("stopped with an object never closed", CLEAN[:-40], 3, "stop", "unconstrained",
     dict(parses=False, unclosed=True, premature_stop=True, syntax_error_offset=None, records_delivered=2)),
    ("cut by max_tokens mid-string is truncation, not corruption", CLEAN[:-45], 3, "length", "unconstrained",
     dict(parses=False, truncated=True, premature_stop=False, corrupted=False, key_drift=False,
          records_delivered=2, records_started=3)),
    ("cut by Anthropic's max_tokens mid-number", CLEAN[:-4], 3, "max_tokens", "tool",
     dict(truncated=True, corrupted=False, syntax_error_offset=None)),
    ("a missing comma between records", CLEAN.replace("}, {", "} {", 1), 3, "stop", "unconstrained",
     dict(parses=False, records_delivered=3, syntax_error="missing comma between elements",
          first_corruption_index=1)),
    ("a record never closed before the next", CLEAN.replace("}, {", ", {", 1), 3, "stop", "unconstrained",
     dict(parses=False, records_delivered=2, records_started=3, first_corruption_index=0)),
    ("a renamed key after a syntax error is still found",
     records_json([record(1), record(2), renamed(3, "is_active", "isActive")]).replace("}, {", "} {", 1),
     3, "stop", "unconstrained", dict(renamed_keys=[(2, "isActive", "is_active")], first_corruption_index=1)),
    ("prose around the JSON", "Here are the users:\n" + CLEAN, 3, "stop", "unconstrained",
     dict(parses=False, records_delivered=3, syntax_error_offset=0, first_corruption_index=0)),
    ("no JSON at all", "I cannot help with that.", 3, "stop", "unconstrained",
     dict(parses=False, records_delivered=0, premature_stop=True, first_corruption_offset=0)),
    ("empty answer", "", 3, "stop", "json_schema",
     dict(parses=False, records_delivered=0, premature_stop=True, unclosed=True)),
    ("constrained: optional field dropped",
     records_json([record(1), record(2, score=_DROP), record(3, score=None)]), 3, "stop", "json_schema",
     dict(parses=True, dropped_optional=[(1, "score"), (2, "score")], missing_keys=[], corrupted=True,
          first_corruption_index=1, first_corruption_kind="dropped_optional")),
    ("unconstrained: a dropped optional field is noted, not corruption",
     records_json([record(1), record(2, score=_DROP)]), 2, "stop", "unconstrained",
     dict(dropped_optional=[(1, "score")], corrupted=False)),
    ("constrained: repeated ids and empty strings",
     records_json([record(1), record(2), record(2, user_name="")]), 3, "stop", "tool",
     dict(parses=True, repeated_ids=[2], empty_values=[(2, "user_name")], value_drift=True,
          first_corruption_index=2)),
    ("constrained: early close after two records (the llama-server shape)",
     records_json([record(1, user_name="", user_email=""), record(2)]), 25, "stop", "json_schema",
     dict(parses=True, records_delivered=2, premature_stop=True, value_drift=True, first_corruption_index=0)),
    ("missing required key in a closed record", records_json([record(1, user_email=_DROP)]), 1, "stop",
     "json_object", dict(missing_keys=[(0, "user_email")], key_drift=False, corrupted=True)),
    ("a key written twice is unexpected",
     CLEAN.replace('"score": 50}', '"score": 50, "score": 51}', 1), 3, "stop", "unconstrained",
     dict(unexpected_keys=[(0, "score")], renamed_keys=[])),
    ("a trailing comma", CLEAN.replace("50}]}", "50},]}"), 3, "stop", "unconstrained",
     dict(parses=False, syntax_error="trailing comma before ']'", first_corruption_index=3)),
    ("Python literals", CLEAN.replace("true", "True", 1), 3, "stop", "unconstrained",
     dict(parses=False, first_corruption_index=0, syntax_error="not a JSON value: 'True'")),
    ("text after the JSON", CLEAN + "\nHope this helps!", 3, "stop", "unconstrained",
     dict(parses=False, records_delivered=3, first_corruption_index=3, syntax_error="text after the JSON")),
    ("more records than asked is not premature", records_json([record(i) for i in range(1, 5)]), 3, "stop",
     "json_schema", dict(records_delivered=4, premature_stop=False, corrupted=False)),
]


@pytest.mark.parametrize("name,text,n,finish,mode,expected", CASES, ids=[c[0] for c in CASES])
def test_analysis_table(name, text, n, finish, mode, expected):
    result = analyse_records(text, n, KEYS, OPTIONAL, finish, mode)
    for attribute, value in expected.items():
        assert getattr(result, attribute) == value, (attribute, getattr(result, attribute), result)


def test_offsets_point_into_the_text_and_name_the_element():
    text = records_json([record(1), record(2), renamed(3, "user_name", "userName")], indent=2)
    result = analyse(text)
    offset = result.first_corruption_offset
    assert text[offset:offset + len('"userName"')] == '"userName"'
    assert result.first_corruption_index == 2
    fenced = "```\n" + text + "\n```"
    shifted = analyse(fenced)
    assert shifted.first_corruption_offset == offset + 4 and shifted.parses


def test_corruption_index_is_the_records_intact_before_it():
    for k in range(4):
        items = [record(i) for i in range(1, 5)]
        items[k] = renamed(k + 1, "user_email", "user_emial")
        result = analyse(records_json(items), n=4)
        assert result.first_corruption_index == k and result.records_delivered == 4


def test_edit_distance():
    assert edit_distance("user_id", "userId") == 2
    assert edit_distance("user_id", "userld") == 2
    assert edit_distance("", "abc") == 3 and edit_distance("same", "same") == 0


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown mode"):
        analyse_records("[]", 1, KEYS, mode="yaml")
