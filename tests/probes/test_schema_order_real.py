"""The schema_order suite against a real llama-server (SmolLM2-135M, json_schema constrained
decoding), through the real CLI: `prober run --suite schema_order --target local --param ...`.

Every item is asked under each variant and stored; McNemar is recomputed here from the stored pairs
alone and must equal the reported metric; key-order conformance is measured. A third variant
declares an optional field before the required label: llama.cpp's grammar emits required keys
first whatever the declared order, so wherever that output has
both keys the label comes first and the declared order is broken.
"""

import json

import pytest

from prober.core import stats
from tests.support.cli import run_suite_on_local

pytestmark = pytest.mark.real

ITEMS = 12
VARIANTS = ('variants=[{name="answer_first", properties=["label", "confidence", "rationale"]}, '
            '{name="reasoning_first", properties=["evidence", "rationale", "label", "confidence"]}, '
            '{name="optional_first", properties=["rationale", "label"], required=["label"]}]')


def _keys(text):
    try:
        pairs = json.loads(text, object_pairs_hook=lambda pairs: pairs)
    except ValueError:
        return None
    return [key for key, _ in pairs] if isinstance(pairs, list) and all(isinstance(p, tuple) for p in pairs) \
        else None


@pytest.mark.timeout(900)
def test_schema_order_suite_on_llama_server(tmp_path, llama_servers):
    server = llama_servers.get()
    rows, metric_rows = run_suite_on_local(tmp_path, server.port, "schema_order", f"limit={ITEMS}",
                                           "max_tokens=160", VARIANTS)
    metrics = {(m["name"], m["labels"].get("variant") or m["labels"].get("a"), m["labels"].get("b")): m
               for m in metric_rows}
    # Every item under every variant, asked under json_schema, rebuilt from the stored labels.
    by_pair = {(r["labels"]["item"], r["labels"]["variant"]): r for r in rows}
    variants = ("answer_first", "reasoning_first", "optional_first")
    assert len(rows) == len(by_pair) == ITEMS * 3
    assert {item for item, _ in by_pair} == {f"weekday-{i:04d}" for i in range(1, ITEMS + 1)}
    assert rows[0]["request_body"]["response_format"]["type"] == "json_schema"

    # McNemar from the stored pairs alone: a stored output is right when its label equals the
    # stored expected label.
    def right(row):
        try:
            value = json.loads(row["output_text"])
        except ValueError:
            return False
        return isinstance(value, dict) and value.get("label") == row["labels"]["expected"]

    items = sorted({item for item, _ in by_pair})
    a_only = sum(right(by_pair[i, "answer_first"]) and not right(by_pair[i, "reasoning_first"]) for i in items)
    b_only = sum(right(by_pair[i, "reasoning_first"]) and not right(by_pair[i, "answer_first"]) for i in items)
    pair = ("answer_first", "reasoning_first")
    assert metrics[("discordant_a_only", *pair)]["value"] == a_only
    assert metrics[("discordant_b_only", *pair)]["value"] == b_only
    assert metrics[("mcnemar_p", *pair)]["value"] == pytest.approx(stats.mcnemar(a_only, b_only).p_value)
    assert metrics[("mcnemar_p", *pair)]["n"] == ITEMS
    for variant in variants:
        expected = sum(right(by_pair[i, variant]) for i in items) / ITEMS
        assert metrics[("accuracy", variant, None)]["value"] == pytest.approx(expected)

    # Key order: all-required variants come out in the declared order; with an optional field
    # declared first, llama.cpp writes the required label first.
    conformance = {v: metrics[("key_order_conformance", v, None)] for v in variants}
    parsed = {v: [k for k in (_keys(by_pair[i, v]["output_text"]) for i in items) if k is not None] for v in variants}
    for variant in variants:
        assert conformance[variant]["n"] == len(parsed[variant])
    for variant in ("answer_first", "reasoning_first"):
        assert not parsed[variant] or conformance[variant]["value"] == 1
    both = [keys for keys in parsed["optional_first"] if "rationale" in keys]
    assert both and all(keys.index("label") < keys.index("rationale") for keys in both)
    assert conformance["optional_first"]["value"] < 1
    print("accuracy:", {v: metrics[("accuracy", v, None)]["value"] for v in variants},
          "json valid:", {v: metrics[("json_valid_rate", v, None)]["value"] for v in variants},
          "key order:", {v: conformance[v]["value"] for v in variants},
          f"discordant {a_only}/{b_only}, p = {metrics[('mcnemar_p', *pair)]['value']:.3g}",
          f"optional_first outputs with both keys: {len(both)}")
