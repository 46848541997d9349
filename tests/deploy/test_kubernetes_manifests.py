"""deploy/kubernetes/: every manifest against the Kubernetes API schemas, offline (kubernetes-validate
carries them), strict so that a misspelt field fails too; the references between the files (Secrets,
ConfigMap, claim, shard count) hold; the ConfigMap's prober.toml is one prober accepts; and the
shell each CronJob hands its pod wires the shard, the batch and the store URL as the docs say."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tests.support.cli import prober

pytestmark = pytest.mark.unit

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
# backoffLimitPerIndex, which lets one shard fail on its own, is on by default from 1.29.
VERSIONS = ("1.29.0", latest_version())


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


DOCS = documents()


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in DOCS if doc["kind"] == kind}


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    jobs = [(name, job["spec"]["jobTemplate"]["spec"]["template"]["spec"]) for name, job in by_kind("CronJob").items()]
    return jobs + [(name, deployment["spec"]["template"]["spec"]) for name, deployment in by_kind("Deployment").items()]


def containers() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{name}/{c['name']}", c) for name, spec in pod_specs() for c in spec["containers"]]


def test_the_manifests_hold_what_the_docs_promise():
    kinds = sorted(doc["kind"] for _, doc in DOCS)
    assert kinds == ["ConfigMap", "CronJob", "CronJob", "CronJob", "Deployment", "PersistentVolumeClaim", "Secret",
                     "Secret", "Service"]
    assert by_kind("CronJob")["prober-fleet"]["spec"]["jobTemplate"]["spec"]["completionMode"] == "Indexed"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name, doc", DOCS, ids=[name for name, _ in DOCS])
def test_each_manifest_is_valid_for_the_api(name, doc, version):
    kubernetes_validate.validate(doc, version, strict=True)


def _fleet() -> dict[str, Any]:
    return copy.deepcopy(by_kind("CronJob")["prober-fleet"])


def _drop_schedule(doc):
    del doc["spec"]["schedule"]


def _misspell_resources(doc):
    container = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources")


def _completions_as_text(doc):
    doc["spec"]["jobTemplate"]["spec"]["completions"] = "four"


def _drop_container_name(doc):
    del doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["name"]


@pytest.mark.parametrize("mutate", [_drop_schedule, _misspell_resources, _completions_as_text, _drop_container_name])
def test_a_broken_manifest_fails_validation(mutate):
    """The check can fail: a required field missing, an unknown field, a wrong type."""
    doc = _fleet()
    kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)
    mutate(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)


def test_every_secret_configmap_and_claim_a_pod_names_is_defined():
    secrets = {name: set(doc["stringData"]) for name, doc in by_kind("Secret").items()}
    for where, container in containers():
        for source in container.get("envFrom", []):
            assert source["secretRef"]["name"] in secrets, where
        for variable in container.get("env", []):
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in secrets.get(ref["name"], set()), (where, ref)
    for where, spec in pod_specs():
        mounted = {mount["name"] for c in spec["containers"] for mount in c["volumeMounts"]}
        assert mounted == {volume["name"] for volume in spec["volumes"]}, where
        for volume in spec["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in by_kind("ConfigMap"), where
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in by_kind("PersistentVolumeClaim"), where


def test_every_api_key_the_config_names_is_in_the_secret_the_probing_pods_get():
    config = by_kind("ConfigMap")["prober-config"]["data"]["prober.toml"]
    named = set(re.findall(r'^\s*api_key_env\s*=\s*"([A-Z0-9_]+)"', config, re.MULTILINE))
    assert named == set(by_kind("Secret")["prober-api-keys"]["stringData"])
    for name in ("prober-nightly", "prober-fleet"):
        (container,) = by_kind("CronJob")[name]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        assert {"secretRef": {"name": "prober-api-keys"}} in container["envFrom"], name


def test_every_container_requests_cpu_and_memory_and_is_limited_in_memory_only():
    """No CPU limit: CFS throttling would pause the client mid-request and inflate what it measures."""
    for where, container in containers():
        assert set(container["resources"]["requests"]) == {"cpu", "memory"}, where
        assert set(container["resources"]["limits"]) == {"memory"}, where


def test_no_pod_gets_a_service_account_token_or_a_writable_root_filesystem():
    """Nothing here calls the Kubernetes API, and nothing writes outside its volumes: a token or a
    writable image would only widen what a compromised pod can do."""
    specs = pod_specs()
    assert len(specs) == 4
    for where, spec in specs:
        assert spec["automountServiceAccountToken"] is False, where
        emptydirs = {volume["name"] for volume in spec["volumes"] if "emptyDir" in volume}
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, (where, container["name"])
            mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
            if container["name"] == "prober":      # Python's and matplotlib's scratch files
                assert mounts.get("/tmp") in emptydirs, where


def test_every_textfile_export_pushes_to_the_pushgateway_service():
    (service,) = by_kind("Service").values()
    port = service["spec"]["ports"][0]["port"]
    (deployment,) = by_kind("Deployment").values()
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert f"--web.listen-address=:{port}" in container["args"]
    url = f"http://{service['metadata']['name']}:{port}"
    for name in ("prober-nightly", "prober-fleet-report"):
        script, _ = _script(name)
        exports = [line for line in script.replace("\\\n", " ").splitlines() if "prober export" in line]
        assert exports and all(f"--push {url}" in line for line in exports), (name, exports)


def test_the_shard_count_is_the_indexed_jobs_completion_count():
    job = by_kind("CronJob")["prober-fleet"]["spec"]["jobTemplate"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    shards = {v["name"]: v.get("value") for v in container["env"]}["PROBER_SHARDS"]
    assert int(shards) == job["completions"] == job["parallelism"]


def test_the_configmap_is_a_config_prober_accepts(tmp_path):
    """What the pods read, read by prober itself: the nightly suite planned for every target
    (a dry run sends nothing and needs no key)."""
    config = tmp_path / "prober.toml"
    config.write_text(by_kind("ConfigMap")["prober-config"]["data"]["prober.toml"], encoding="utf-8")
    result = prober("run", "--suite", "nightly", "--config", str(config), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for target in ("anthropic", "openai", "vllm"):
        assert target in result.stdout


# --- the pods' shell -----------------------------------------------------------------------------

def _script(cronjob: str) -> tuple[str, dict[str, str]]:
    """The pod's `sh -c` script and the literal env values the manifest gives it."""
    (container,) = by_kind("CronJob")[cronjob]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c"]
    (script,) = container["args"]
    return script, {v["name"]: v["value"] for v in container["env"] if "value" in v}


def _run_script(cronjob: str, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the script under sh with a stand-in `prober` first on PATH that records its arguments:
    what is under test is the manifest's shell, not prober."""
    script, literal = _script(cronjob)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    stand_in = bin_dir / "prober"
    # (it records the store URL prober would read from the environment as a last argument, db=...)
    stand_in.write_text(f"#!{sys.executable}\nimport os, sys\nwith open({str(calls)!r}, 'a') as f:\n"
                        "    f.write('\\0'.join([*sys.argv[1:], 'db=' + os.environ.get('PROBER_DB', '')]) + '\\n')\n",
                        encoding="utf-8")
    stand_in.chmod(0o755)
    full_env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **literal, **env}
    done = subprocess.run(["/bin/sh", "-c", script], env=full_env, capture_output=True, text=True, timeout=60)
    lines = calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []
    return done, [line.split("\0") for line in lines]


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_kubernetes_substitutes_nothing_in_the_scripts():
    """The kubelet replaces $(NAME) of a defined variable and $$ in args before the shell runs:
    the scripts use the shell's own $NAME, so what the test runs is what the pod runs."""
    for name in ("prober-nightly", "prober-fleet", "prober-fleet-report"):
        script, _ = _script(name)
        assert "$$" not in script
        assert not re.search(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", script), name


def test_a_shard_of_a_scheduled_night_runs_its_slice_in_the_nights_batch(tmp_path):
    # The CronJob controller names the Job after its scheduled time in minutes since the epoch.
    scheduled = datetime(2026, 12, 1, 3, 15, tzinfo=UTC)
    minutes = int(scheduled.timestamp()) // 60
    done, calls = _run_script("prober-fleet", tmp_path, JOB_NAME=f"prober-fleet-{minutes}",
                              JOB_COMPLETION_INDEX="2", PROBER_DB="postgresql+psycopg://p:secret@db/prober")
    assert done.returncode == 0, done.stderr
    (argv,) = calls
    assert argv[:2] == ["run", "--suite"]
    assert _option(argv, "--shard") == "2/4"
    assert _option(argv, "--batch") == "2026-12-01T03:15Z"
    assert argv[-1] == "db=postgresql+psycopg://p:secret@db/prober"      # from the environment,
    assert not any("secret" in arg for arg in argv[:-1])                   # never on the command line


def test_a_job_made_by_hand_uses_its_name_as_the_batch(tmp_path):
    done, calls = _run_script("prober-fleet", tmp_path, JOB_NAME="prober-fleet-rerun-7", JOB_COMPLETION_INDEX="0",
                              PROBER_DB="postgresql+psycopg://db/prober")
    assert done.returncode == 0, done.stderr
    (argv,) = calls
    assert _option(argv, "--batch") == "prober-fleet-rerun-7"
    assert _option(argv, "--shard") == "0/4"


def test_the_fleet_report_reads_tonights_batch(tmp_path):
    """The batch the shards wrote tonight: today at prober-fleet's scheduled time."""
    before = datetime.now(UTC)
    done, calls = _run_script("prober-fleet-report", tmp_path, PROBER_DB="postgresql+psycopg://db/prober")
    assert done.returncode == 0, done.stderr
    report, export = calls
    minute, hour = by_kind("CronJob")["prober-fleet"]["spec"]["schedule"].split()[:2]
    tonight = {f"{day:%Y-%m-%d}T{int(hour):02d}:{int(minute):02d}Z" for day in (before, datetime.now(UTC))}
    assert _option(report, "--batch") in tonight
    assert export[0] == "export" and _option(export, "--format") == "prometheus"


@pytest.mark.parametrize("cronjob", ["prober-nightly", "prober-fleet", "prober-fleet-report"])
def test_an_empty_store_secret_stops_the_pod_before_prober_runs(cronjob, tmp_path):
    """An empty PROBER_DB would fall back to a SQLite file in the pod's scratch directory, lost with the pod."""
    done, calls = _run_script(cronjob, tmp_path, JOB_NAME="prober-fleet-29412345", JOB_COMPLETION_INDEX="0",
                              PROBER_DB="")
    assert done.returncode == 2
    assert "prober-store" in done.stderr
    assert calls == []
