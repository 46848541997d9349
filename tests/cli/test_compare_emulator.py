"""`prober compare` on emulator runs with a known difference: a scenario file whose first-token
delay is 1.5 times the base one. The difference is found, with an interval that covers the truth,
and runs of one scenario show no significant difference in at least 95% of the metrics compared,
pair after pair.

The truth is the emulator's own record of its TTFTs (its ground truth), known to the client up to
what the client adds to each request (the request's bytes on the way in, the first token's on the
way out): measured per request as the client's TTFT minus the emulator's, a few milliseconds that
vary with the machine's load from run to run. Any overhead from none up to the largest median seen
on either side moves the ratio the client can observe within a range; the interval must meet it.
"""

import itertools
import json
import statistics
from collections import defaultdict

import pytest

from prober.alerting.baseline import what_changed
from prober.alerting.drift import min_effect_for
from prober.core.config import DriftConfig, ProberConfig
from prober.reports.compare import Comparison, Side, compare
from prober.run.runner import Runner
from tests.support.cli import prober
from tests.support.emulated import emulator_process, ground_truth
from tests.support.timing import timing_sensitive

pytestmark = pytest.mark.emulator

# Small runs: two levels, 36 measured requests each (p50 and p90 bounded, p99 flagged). A request
# is 100 ms to the first token (150 in SLOW) and 8 tokens at 200/s: 4 runs in 15 s, where 200 ms
# and 50 tokens/s took 30 s.
PARAMS = {"levels": [4, 8], "requests_per_level": 36, "warmup": 1, "max_tokens": 8, "input_tokens": 16}
BASE = "first_token_delay_ms = 100\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 200\nslots = 8\n"
SLOW = BASE.replace("first_token_delay_ms = 100", "first_token_delay_ms = 150")
BASE_RUNS = 3


def _runs(tmp_path, scenario: str, count: int) -> list[tuple[str, dict[int, tuple[float, float]]]]:
    """`count` latency runs against one emulator serving `scenario`: (run id, per concurrency level
    the emulator's own median TTFT over the measured requests and the median client overhead)."""
    from prober.store import Store

    found = []
    with emulator_process(tmp_path, scenario) as base_url:
        config = ProberConfig.model_validate({
            "store": {"url": f"sqlite:///{tmp_path}/prober.db"}, "runner": {"progress": False},
            "targets": {"emu": {"protocol": "openai", "base_url": base_url, "model": "emulator-1"}}})
        for _ in range(count):
            result = Runner(config).run("latency", ["emu"], PARAMS)
            assert result.exit_code == 0, result.problems
            found.append(result.run_id)
        truth = ground_truth(base_url)
    runs = []
    with Store.open(f"sqlite:///{tmp_path}/prober.db") as store:
        for run_id in found:
            by_level = defaultdict(list)
            for row in store.samples(run_id):
                if row["labels"]["phase"] == "measure":
                    seen = truth[row["request_id"]]["ttft_ms"]
                    by_level[row["labels"]["concurrency"]].append((seen, row["ttft_ms"] - seen))
            runs.append((run_id, {level: (statistics.median(seen for seen, _ in pairs),
                                          statistics.median(overhead for _, overhead in pairs))
                                  for level, pairs in by_level.items()}))
    return runs


def _compare_in_process(tmp_path, run_a: str, run_b: str) -> Comparison:
    from prober.store import Store

    with Store.open(f"sqlite:///{tmp_path}/prober.db") as store:
        return compare(store, Side("A", [store.get_run(run_a)]), Side("B", [store.get_run(run_b)]), what_changed,
                       lambda kind, metric: min_effect_for(kind, metric, DriftConfig()))


@timing_sensitive    # the client saturating at every level under outside load leaves nothing to judge
def test_compare_finds_a_known_ttft_difference_and_no_difference_between_runs_of_one_scenario(tmp_path):
    base = _runs(tmp_path, BASE, BASE_RUNS)
    ((slow_run, slow_levels),) = _runs(tmp_path, SLOW, 1)

    base_run, base_levels = base[0]
    done = prober("compare", base_run, slow_run, "--db", f"sqlite:///{tmp_path}/prober.db", "--format", "json",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    ttft = {c["labels"]["concurrency"]: c for c in found["compared"] if c["name"] == "ttft_p50_ms"}
    assert set(ttft) == set(PARAMS["levels"])
    # A level where the client's own event loop lagged is shown and not tested (docs/measurement-conventions.md,
    # client honesty); the others must find the difference.
    tested = {level: c for level, c in ttft.items() if c["note"] != "client saturated"}
    assert tested, "the client was saturated at every level: nothing to judge"
    for level, c in tested.items():
        (base_ttft, base_overhead), (slow_ttft, slow_overhead) = base_levels[level], slow_levels[level]
        assert 0.45 < slow_ttft / base_ttft - 1 < 0.55        # +50% by the scenario files
        overhead = max(base_overhead, slow_overhead, 0.0)
        truth = (slow_ttft / (base_ttft + overhead) - 1, (slow_ttft + overhead) / base_ttft - 1)
        assert c["significant"] and c["relative"], c
        assert c["low"] <= truth[1] and truth[0] <= c["high"], (c, truth)
    # Strongest evidence first: the TTFT (and end-to-end) medians lead the table.
    assert {c["name"] for c in found["compared"][:len(tested)]} <= {"ttft_p50_ms", "e2e_p50_ms", "ttft_p90_ms"}

    # Runs of one scenario, every pair: at most 5% of the metrics compared are called significant
    # (measured over 28 pairs of 8 runs of BASE on this 2-core machine under a load average of 10:
    # 15 of 812, 1.8%; 15 of the 448 with a test, 3.3%; all of them the median time to headers,
    # 1-17 ms that the machine's load moves from run to run; 1 pair of 28 had 2 of its 29; with
    # today's shorter BASE, at a load average of 3 to 4.5: 10 of 812, 9 of them the time to
    # headers and 1 the ITL median, in 9 of the 28 pairs), and never the TTFT median.
    significant, tested, compared = [], 0, 0
    for (run_a, _), (run_b, _) in itertools.combinations(base, 2):
        pair = _compare_in_process(tmp_path, run_a, run_b)
        assert len(pair.compared) >= 20 and not pair.not_comparable
        assert not [c for c in pair.significant if c.name == "ttft_p50_ms"], pair.significant
        significant += pair.significant
        tested += sum(1 for c in pair.compared if c.p_value is not None)
        compared += len(pair.compared)
    print(f"same scenario: {len(significant)} of {tested} tested metrics ({compared} compared) significant "
          f"over {BASE_RUNS * (BASE_RUNS - 1) // 2} pairs")
    assert len(significant) <= 0.05 * compared, significant
