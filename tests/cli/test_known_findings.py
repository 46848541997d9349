"""Known behaviour per target, end to end through the CLI against a quirky server this test
starts: it speaks Anthropic Messages but leaves `usage` out of message_delta (a conformance
finding, anthropic_event_shape) and answers in prose whatever structure is asked for
(structured_output_ignored). Listed in the target's `known`, both become notices: the structured-
output rate stays 0 and an SLO on it holds; not listed, the same run's findings count, the rate is 1
and the SLO breaks (exit 1). A known finding the run did not see is named at its end."""

from __future__ import annotations

import json
import textwrap
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from prober.core.findings import finding_code
from prober.store import Store
from tests.support.cli import prober
from tests.support.threaded_http import ThreadedHTTP

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(600)]


def _events(text: str) -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "q", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        # The quirk: no usage in message_delta (the SDK type requires it).
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


class QuirkyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        payload = _events("The review sounds positive to me, four stars.")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


KNOWN = ["anthropic_event_shape", "structured_output_ignored", "anthropic_no_message_stop"]


def _run(tmp_path, server: ThreadedHTTP, known: list[str]):
    (tmp_path / "prober.toml").write_text(textwrap.dedent(f"""
        [store]
        url = "sqlite:///{tmp_path}/p.db"
        [runner]
        progress = false
        [targets.q]
        protocol = "anthropic"
        base_url = "{server.url}"
        model = "q"
        known = {json.dumps(known)}
        [[slo]]
        name = "structure_honoured"
        metric = "structured_output_ignored_rate"
        labels = {{ prompt = "review_json" }}
        comparator = "<="
        threshold = 0
    """))
    done = prober("run", "--suite", "divergence", "--target", "q", "--param", 'prompts=["review_json"]',
                  "--param", "levels=[1]", "--param", "requests_per_level=3", "--config", "prober.toml",
                  cwd=tmp_path, timeout=300)
    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        (summary,) = store.list_runs(limit=1)
        rows, metrics = store.samples(summary["id"]), store.metrics(summary["id"])
    rate = [m["value"] for m in metrics if m["name"] == "structured_output_ignored_rate"]
    return done, summary["id"], rows, rate


def _codes(rows, key):
    out = set()
    for row in rows:
        lines = row["findings"] if key == "findings" else (row["extra"] or {}).get("notices", [])
        out |= {finding_code(line.removeprefix("known finding ").split(": ", 1)[1]) if key == "notices"
                else finding_code(line) for line in lines or []}
    return out


def test_known_findings_become_notices_and_a_new_one_still_counts(tmp_path):
    with ThreadedHTTP(QuirkyHandler) as server:
        known_dir, new_dir = tmp_path / "known", tmp_path / "new"
        known_dir.mkdir()
        new_dir.mkdir()
        done, run_id, rows, rate = _run(known_dir, server, KNOWN)
        assert done.returncode == 0, done.stdout + done.stderr
        assert rows and _codes(rows, "findings") == set()
        assert _codes(rows, "notices") == {"anthropic_event_shape", "structured_output_ignored"}
        assert rate == [0.0]
        # The one known finding no sample showed is named at the run's end, and only that one.
        assert ("known finding anthropic_no_message_stop not seen on target q: remove it from known if the "
                "server changed") in done.stderr
        assert "known finding anthropic_event_shape not seen" not in done.stderr
        show = prober("show", run_id, "--config", "prober.toml", cwd=known_dir)
        assert show.returncode == 0, show.stderr
        assert "known findings on target q, kept as notices: anthropic_event_shape" in show.stdout

        done, _, rows, rate = _run(new_dir, server, [])
    # Not known: the same answers carry the findings, the rate counts them and the SLO breaks.
    assert done.returncode == 1, done.stdout + done.stderr
    assert {"anthropic_event_shape", "structured_output_ignored"} <= _codes(rows, "findings")
    assert rate == [1.0]
    assert "not seen on target" not in done.stderr


def test_an_unknown_code_in_known_is_a_usage_error(tmp_path):
    (tmp_path / "prober.toml").write_text(textwrap.dedent("""
        [targets.q]
        protocol = "anthropic"
        base_url = "http://127.0.0.1:9"
        model = "q"
        known = ["anthropic_no_such_thing"]
    """))
    done = prober("run", "--suite", "divergence", "--target", "q", "--config", "prober.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error:") and "anthropic_no_such_thing" in done.stderr
    assert "Traceback" not in done.stderr
