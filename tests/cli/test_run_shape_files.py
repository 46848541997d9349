"""`prober run` with a bad request-shape or trace file: one clear line naming the file and the
line, exit code 2, no traceback, and no run started (nothing is sent)."""

import pytest

from prober.store import Store
from tests.support.cli import assert_one_clear_line, prober

pytestmark = pytest.mark.unit

CONFIG = ('[store]\nurl = "sqlite:///{db}"\n\n[targets.a]\nprotocol = "openai"\n'
          'base_url = "http://127.0.0.1:9"\nmodel = "m"\n')


def _run(tmp_path, *params):
    config = tmp_path / "prober.toml"
    config.write_text(CONFIG.format(db=tmp_path / "p.db"))
    args = [arg for param in params for arg in ("--param", param)]
    return prober("run", "--suite", "latency", "--config", str(config), *args, cwd=tmp_path)



@pytest.mark.parametrize("content, fragments", [
    (None, ("trace.jsonl", "trace file not found")),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 9, "input_length": 5}\n',
     ("trace.jsonl: line 2", "no output_tokens / output_length / GeneratedTokens")),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nlater,5,2\n", ("trace.jsonl: line 2", "TIMESTAMP")),
])
def test_a_bad_trace_file_is_one_line_and_exit_2(tmp_path, content, fragments):
    if content is not None:
        (tmp_path / "trace.jsonl").write_text(content)
    result = _run(tmp_path, 'arrival="trace"', 'trace_file="trace.jsonl"')
    assert_one_clear_line(result, *fragments)
    assert _runs(tmp_path) == []


def _runs(tmp_path):
    if not (tmp_path / "p.db").exists():
        return []
    store = Store.open(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        return store.list_runs(limit=5)
    finally:
        store.close()


def test_a_bad_shapes_file_or_shape_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "shapes.jsonl").write_text('{"input_tokens": -3, "output_tokens": 2}\n')
    assert_one_clear_line(_run(tmp_path, 'shapes_file="shapes.jsonl"'),
                           "shapes.jsonl: line 1", "input_tokens: must be a whole number")
    assert_one_clear_line(_run(tmp_path, 'input_shape={kind = "uniform", low = 9}'), "input_shape", "needs high")
