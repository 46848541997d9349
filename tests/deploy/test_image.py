"""The Dockerfile built and run as CI builds it (scripts/build-image.sh: a Debian base from
mmdebstrap, buildah with chroot isolation): the image answers `prober --version` with this tree's
version and completes a short run against the bundled emulator. The build uses a buildah storage
root of its own, emptied and removed afterwards."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import prober

pytestmark = [pytest.mark.infra, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]


def _buildah(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", "--root", str(root / "storage"), "--runroot", str(root / "run"), *args],
                          env={**os.environ, "STORAGE_DRIVER": "vfs"}, capture_output=True, text=True, timeout=300)


@pytest.fixture
def buildah_root(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("buildah")
    yield root
    # The script removes what it made; this is the net under a failed or killed run.
    _buildah(root, "rm", "--all")
    _buildah(root, "rmi", "--all", "--force")
    shutil.rmtree(root, ignore_errors=True)


def test_the_image_builds_and_runs_prober_against_the_emulator(buildah_root):
    image = f"localhost/prober:test-{os.getpid()}"
    env = {**os.environ, "PROBER_BUILDAH_ROOT": str(buildah_root), "PROBER_IMAGE": image}
    built = subprocess.run(["bash", "scripts/build-image.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=2300)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    out = built.stdout

    version = out.split("== prober --version\n", 1)[1].splitlines()[0]
    assert version == f"prober {prober.__version__}"

    emulator_run = out.split("== short emulator run\n", 1)[1]
    run_id = re.search(r"^6 samples stored in sqlite:///prober\.db; run id ([0-9a-f]{12}); \d+ metrics$", emulator_run,
                       re.MULTILINE)
    assert run_id, emulator_run
    assert re.search(rf"^run {run_id.group(1)} \(complete\)$", emulator_run, re.MULTILINE), emulator_run
    assert "emulator latency c=1: 6/6 requests, 0 failed" in emulator_run
    assert re.search(r"\bttft_p50_ms\b", emulator_run)
    assert "reports/index.html" in emulator_run

    summary = re.search(r"^build-image: rootfs=(cached|built) rootfs_s=\d+ import_s=\d+ build_s=\d+ check_s=\d+ "
                        r"cleanup_s=\d+ total_s=\d+$", out, re.MULTILINE)
    assert summary, out[-2000:]
    print(summary.group(0))   # the build's cost per step, in CI's log (-rA)

    # Nothing it made is left behind: no container, no image (the base included).
    containers = _buildah(buildah_root, "containers", "--quiet")
    images = _buildah(buildah_root, "images", "--quiet")
    assert containers.returncode == 0 and containers.stdout.strip() == "", containers.stdout + containers.stderr
    assert images.returncode == 0 and images.stdout.strip() == "", images.stdout + images.stderr
