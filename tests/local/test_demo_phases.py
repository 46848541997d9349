"""scripts/demo_phases.py, the timer `make demo` prints its per-phase costs with: each phase's CPU
(its own processes, and llama-server's, which runs in a session of its own), its exit codes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_phases.py"
spec = importlib.util.spec_from_file_location("demo_phases", SCRIPT)
assert spec is not None and spec.loader is not None
demo_phases = importlib.util.module_from_spec(spec)
sys.modules["demo_phases"] = demo_phases   # dataclasses look their module up there
spec.loader.exec_module(demo_phases)

# About 0.5 s of CPU in a child of the phase's shell: counted through os.wait4.
BURN = (f"{sys.executable} -c 'import time; t = time.process_time(); "
        "exec(\"while time.process_time() - t < 0.5: pass\")'")


@pytest.mark.unit
def test_phase_specs_name_their_accepted_exit_codes():
    assert demo_phases.parse_phase("run:0,1=prober run x=y") == demo_phases.Phase("run", (0, 1), "prober run x=y")
    assert demo_phases.parse_phase("model=true").ok_codes == (0,)
    for bad in ("no command", "=true", "run:one=true"):
        with pytest.raises(ValueError):
            demo_phases.parse_phase(bad)


@pytest.mark.unit
def test_each_phase_counts_its_childrens_cpu_and_the_servers(tmp_path, capsys):
    server = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        state = tmp_path / "llama-server-8080.json"
        state.write_text(json.dumps({"pid": server.pid}))
        report = tmp_path / "phases.json"
        code = demo_phases.main(["--server-state", str(state), "--json", str(report),
                                 f"busy={BURN}", "idle=sleep 1"])
    finally:
        server.kill()
        server.wait()
    assert code == 0
    busy, idle = json.loads(report.read_text())["phases"]
    assert busy["cpu_s"] - busy["server_cpu_s"] >= 0.4     # the child's own half second, through wait4
    assert idle["cpu_s"] - idle["server_cpu_s"] < 0.2      # sleep uses none of its own
    # the spinning "server" was charged to it: some ticks of it, however loaded the machine
    assert idle["server_cpu_s"] > 0
    out = capsys.readouterr().out
    assert "busy" in out and "idle" in out and "total" in out and "CPU s" in out


@pytest.mark.unit
def test_a_failing_phase_stops_the_demo_with_its_exit_code(tmp_path, capsys):
    code = demo_phases.main(["first=exit 3", "never=touch " + str(tmp_path / "ran")])
    assert code == 3 and not (tmp_path / "ran").exists()
    assert "error: phase first exited with code 3" in capsys.readouterr().err
    assert demo_phases.main(["run:0,1=exit 1"]) == 0
    assert demo_phases.main(["bad spec"]) == 2


@pytest.mark.unit
def test_an_interrupted_demo_still_prints_the_phases_it_finished():
    # `; true` keeps the shell from exec'ing sleep: the phase's sleep is a grandchild, which must be
    # stopped too, or it holds the pipes open and communicate() waits for its full minute.
    demo = subprocess.Popen([sys.executable, str(SCRIPT), "first=true", "second=sleep 60; true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert demo.stderr is not None
    for line in demo.stderr:
        if line.startswith("== second:"):
            break
    demo.terminate()
    out, _ = demo.communicate(timeout=30)
    assert demo.returncode == 130
    rows = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert "first" in rows and "second" not in rows and "total" in rows
