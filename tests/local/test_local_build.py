"""The local llama-server build: portable flags, never a cached binary built with other flags, a
smoke test that keeps a dying binary out of the cache, and one clear line when a binary dies.

The real build itself runs in `make test` (`prober local install`) before pytest; the last test here
inspects the binary it produced.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from prober.local import build as local_build
from prober.local import server as local
from tests.support.cli import prober

# A stand-in for a binary built for CPU features the kernel does not allow: it dies of SIGILL the
# way the AMX build did (`trap invalid opcode`), before it listens.
DIES_OF_SIGILL = "#!/bin/sh\nkill -ILL $$\n"


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.unit
def test_other_flags_never_reuse_a_cached_build(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBER_LLAMA_CMAKE_ARGS", raising=False)
    default = local_build.cmake_flags()
    monkeypatch.setenv("PROBER_LLAMA_CMAKE_ARGS", "-DGGML_AVX2=OFF")
    other = local_build.cmake_flags()
    assert "-DGGML_NATIVE=OFF" in default and other[-1] == "-DGGML_AVX2=OFF"
    assert local_build.build_dir(tmp_path, default) != local_build.build_dir(tmp_path, other)

    # A build directory whose smoke test did not pass (or never ran) is not a cached binary.
    directory = local_build.build_dir(tmp_path, default)
    directory.mkdir(parents=True)
    _script(directory / "llama-server", "#!/bin/sh\n")
    assert local_build.cached_binary(tmp_path, default) is None
    (directory / local_build.BUILD_RECORD).write_text(json.dumps({"smoke_test": "failed"}))
    assert local_build.cached_binary(tmp_path, default) is None
    (directory / local_build.BUILD_RECORD).write_text(json.dumps({"smoke_test": "passed"}))
    assert local_build.cached_binary(tmp_path, default) == directory / "llama-server"
    assert local_build.cached_binary(tmp_path, other) is None


@pytest.mark.emulator
def test_smoke_test_names_the_signal(tmp_path):
    binary = _script(tmp_path / "llama-server", DIES_OF_SIGILL)
    failure = local_build.smoke_test(binary, tmp_path / "model.gguf", timeout=20)
    assert failure is not None and "SIGILL" in failure and "illegal instruction" in failure


@pytest.mark.emulator
def test_binary_that_fails_its_smoke_test_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBER_LLAMA_CMAKE_ARGS", raising=False)
    staging = tmp_path / "staging"
    staging.mkdir()
    built = _script(staging / "llama-server", DIES_OF_SIGILL)
    # Only the compiler step is replaced (the real one runs in `make test`); the smoke test is real.
    monkeypatch.setattr(local_build, "compile_llama_server", lambda cache, flags, jobs: (staging, built))
    with pytest.raises(local_build.LocalBuildError) as failed:
        local_build.build_llama_server(tmp_path, tmp_path / "model.gguf")
    message = str(failed.value)
    assert "SIGILL" in message and "prober local install --rebuild" in message
    assert local_build.cached_binary(tmp_path, local_build.cmake_flags()) is None
    assert not local_build.build_dir(tmp_path, local_build.cmake_flags()).exists()
    assert not staging.exists()   # the build tree is cleaned up either way


@pytest.mark.emulator
def test_start_reports_a_dying_binary_in_one_line(tmp_path):
    binary = _script(tmp_path / "llama-server", DIES_OF_SIGILL)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    env = {"PROBER_LLAMA_SERVER": str(binary), "PROBER_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "cache" / "models").mkdir(parents=True)
    shutil.copy(model, tmp_path / "cache" / "models" / Path(local.MODEL_MEMBER).name)
    result = prober("local", "start", "--port", "18937", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "SIGILL" in lines[0] and "prober local install --rebuild" in lines[0]


@pytest.mark.real
def test_the_built_binary_is_portable_and_smoke_tested():
    """The binary `make test` built: recorded as smoke-tested with portable flags, and free of the
    AMX tile instructions that killed the native build on an AMX-advertising VM."""
    binary = local.llama_server_binary(install=False)
    if not binary.exists():
        pytest.fail(f"{binary} is missing: `make test` runs `prober local install` before pytest")
    record = json.loads((binary.parent / local_build.BUILD_RECORD).read_text())
    assert record["smoke_test"] == "passed"
    assert "-DGGML_NATIVE=OFF" in record["cmake_flags"]
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils) is needed to inspect the binary"
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(binary)], capture_output=True,
                             text=True, check=True).stdout
    amx = [line for line in listing.splitlines() if any(op in line for op in ("tilezero", "ldtilecfg",
                                                                              "tileloadd", "tdpbssd"))]
    assert amx == []
    assert len(listing) > 1_000_000   # it really disassembled a server, not an empty file


@pytest.mark.unit
def test_a_long_build_step_says_how_far_it_is_with_a_timestamp(tmp_path, monkeypatch, capsys):
    # A stand-in for ninja: four steps, 0.3 s apart, its output going to the log, not the terminal.
    step = _script(tmp_path / "fake-ninja", "#!/bin/sh\nfor i in 1 2 3 4; do echo \"[$i/4] Building obj$i\"; "
                                             "sleep 0.3; done\n")
    monkeypatch.setenv("PROBER_PROGRESS_INTERVAL_S", "0.1")
    local_build._run_step([str(step)], "cmake build of llama-server", tmp_path / "build.log")
    lines = capsys.readouterr().err.splitlines()
    assert "Building obj" not in "\n".join(lines)       # the tool's own output stays in the log
    marks = [re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z cmake build of llama-server: (?:(\d+)/4|0) "
                      r"steps, [\d.]+s, eta (\d+:\d\d:\d\d|\?)$", line) for line in lines]
    assert len(lines) >= 4 and all(marks), lines
    done = [int(m.group(1)) for m in marks if m and m.group(1)]     # before its first mark: "0 steps"
    assert done == sorted(done) and done[-1] >= 3, done


@pytest.mark.unit
def test_only_ggml_keeps_O3_and_the_split_is_part_of_the_build_key(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBER_LLAMA_CMAKE_ARGS", raising=False)
    flags = local_build.cmake_flags()
    assert "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" in flags and "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" in flags
    assert 'set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")' in local_build.GGML_OPTIMISATION
    before = local_build.build_key(flags)
    monkeypatch.setattr(local_build, "GGML_OPTIMISATION", local_build.GGML_OPTIMISATION.replace("-O3", "-O2"))
    assert local_build.build_key(flags) != before   # another include never reuses this build


@pytest.mark.real
def test_configure_compiles_ggml_at_O3_alone_and_the_rest_at_O1_in_unity_batches(tmp_path, monkeypatch):
    """The flags as cmake applies them: every llama-server compile command, from the cached sdist."""
    monkeypatch.delenv("PROBER_LLAMA_CMAKE_ARGS", raising=False)
    if shutil.which("ninja") is None:
        pytest.fail("ninja is needed (scripts/install-build-deps.sh installs it)")
    source = local_build._extract_source(local_build._download_sdist(local.cache_dir()), tmp_path / "src")
    local_build.configure(source, tmp_path / "build", local_build.cmake_flags(), tmp_path / "build.log")
    commands = subprocess.run(["ninja", "-C", str(tmp_path / "build"), "-t", "commands", "llama-server"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
    compiles = [line for line in commands if " -c " in line]
    ggml = [line for line in compiles if f"{source}/ggml/src/" in line.split(" -c ")[1]]
    rest = [line for line in compiles if line not in ggml]
    batches = [line for line in rest if "/Unity/unity_" in line.split(" -c ")[1]]
    # ggml compiles one source a run, as upstream does; outside it, sources share compiler runs in
    # unity batches (the multimodal helpers and llama's own library excepted).
    assert len(ggml) >= 20 and len(batches) >= 10 and len(rest) > len(batches)
    assert all(" -O3 " in line and " -O1 " not in line for line in ggml)
    assert all(" -O1 " in line and " -O3 " not in line for line in rest)
    assert not any("-march=native" in line for line in compiles)
