"""deploy/kubernetes and the Dockerfile (issue 17, part 3).

The manifests are rendered with ``kubectl kustomize`` (kubectl ships with this
machine; without it only the base's files are read and the overlay test
skips), validated against the Kubernetes OpenAPI schemas of several releases
with ``kubernetes-validate`` in strict mode (an unknown field is an error),
and checked against the server's own contract: probes, drain timing, ports,
resources, the image's user. Building and running the image needs a container
engine and minutes: ``.ci/container_test.py`` does it from ``.ci/run``; here
only its mirroring of the manifests (user, read-only root, volumes, env) is
checked.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
KUBECTL = shutil.which("kubectl")
# Releases validated against: the oldest with the preStop sleep action on by default (beta in 1.30) that the
# validator ships, and its newest.
KUBE_VERSIONS = ("1.32.0", kubernetes_validate.utils.latest_version())


def render(overlay: str) -> list[dict]:
    """The objects of ``deploy/kubernetes/<overlay>``: ``kubectl kustomize`` output, or the base's files."""
    if KUBECTL:
        out = subprocess.run([KUBECTL, "kustomize", str(KUBE / overlay)], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]
    if overlay != "base":
        pytest.skip("kubectl not installed: cannot render the kustomize overlay")
    spec = yaml.safe_load((KUBE / "base" / "kustomization.yaml").read_text())
    return [doc for name in spec["resources"] for doc in yaml.safe_load_all((KUBE / "base" / name).read_text()) if doc]


def by_kind(objects: list[dict]) -> dict[str, dict]:
    kinds = {}
    for obj in objects:
        assert obj["kind"] not in kinds, f"two {obj['kind']} objects"
        kinds[obj["kind"]] = obj
    return kinds


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(c: dict) -> dict[str, str]:
    """The container's literal env values (those from a Secret are not here: `test_the_api_key_comes_from_a_secret`)."""
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


@pytest.mark.parametrize("overlay", ["base", "gpu"])
@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_manifests_match_the_kubernetes_schema(overlay, version):
    objects = render(overlay)
    assert {o["kind"] for o in objects} == {"Deployment", "Service", "HorizontalPodAutoscaler"}
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("mutate, where", [
    (lambda c: c.__setitem__("readinesProbe", c.pop("readinessProbe")), "readinesProbe"),
    (lambda c: c["startupProbe"].__setitem__("periodSecond", c["startupProbe"].pop("periodSeconds")), "periodSecond"),
    (lambda c: c["livenessProbe"].__setitem__("failureThreshold", "three"), "three"),
])
def test_a_misspelt_or_mistyped_field_is_rejected(mutate, where):
    deployment = by_kind(render("base"))["Deployment"]
    kubernetes_validate.validate(deployment, KUBE_VERSIONS[-1], strict=True)
    broken = copy.deepcopy(deployment)
    mutate(container(broken))
    with pytest.raises(kubernetes_validate.ValidationError, match=where):
        kubernetes_validate.validate(broken, KUBE_VERSIONS[-1], strict=True)


def test_probes_and_drain_timing_follow_the_servers_contract():
    from zsnli.config import Settings

    deployment = by_kind(render("base"))["Deployment"]
    pod, c = deployment["spec"]["template"]["spec"], container(deployment)
    env = env_of(c)
    (port,) = c["ports"]
    assert port["name"] == "http" and str(port["containerPort"]) == env["PORT"]
    for probe in ("startupProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    # /health is 503 while draining: liveness must not use it, or a drain would restart the pod
    assert c["livenessProbe"] == {**c["livenessProbe"], "tcpSocket": {"port": "http"}}
    assert "httpGet" not in c["livenessProbe"]
    settings = Settings.from_env(env)  # the container's settings parse
    sleep_s = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert sleep_s > 0 and settings.drain_timeout_s > 0
    assert pod["terminationGracePeriodSeconds"] > settings.drain_timeout_s + sleep_s
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "model load + warm-up need minutes"


@pytest.mark.parametrize("overlay", ["base", "gpu"])
def test_the_api_key_comes_from_a_secret(overlay):
    """``ZSNLI_API_KEY`` is passed from an optional Secret, never written in the manifests; the probes need no key
    (/health stays open: `zsnli.serving.auth.OPEN_PATHS`)."""
    from zsnli.serving.auth import OPEN_PATHS

    c = container(by_kind(render(overlay))["Deployment"])
    (entry,) = [e for e in c["env"] if e["name"] == "ZSNLI_API_KEY"]
    assert "value" not in entry
    ref = entry["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"] and ref["optional"] is True
    assert all(c[p]["httpGet"]["path"] in OPEN_PATHS for p in ("startupProbe", "readinessProbe"))


def test_cpu_resources_service_and_autoscaler_fit_together():
    objects = by_kind(render("base"))
    deployment, service, hpa = objects["Deployment"], objects["Service"], objects["HorizontalPodAutoscaler"]
    c = container(deployment)
    requests = c["resources"]["requests"]
    assert requests["cpu"] and requests["memory"] and c["resources"]["limits"]["memory"]
    assert env_of(c)["ZSNLI_TORCH_THREADS"] == str(requests["cpu"])
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]
    assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])


def test_gpu_overlay_asks_for_one_gpu_and_runs_on_cuda():
    c = container(by_kind(render("gpu"))["Deployment"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1 == c["resources"]["requests"]["nvidia.com/gpu"]
    env = env_of(c)
    assert env["ZSNLI_DEVICE"] == "cuda"
    assert env["ZSNLI_DRAIN_TIMEOUT_S"] == env_of(container(by_kind(render("base"))["Deployment"]))["ZSNLI_DRAIN_TIMEOUT_S"]


@pytest.mark.parametrize("overlay", ["base", "gpu"])
def test_bakeoff_store_and_key_are_on_a_writable_volume(overlay):
    """The root filesystem is read-only: the bake-off's SQLite store and receipt key must sit on a volume."""
    from pathlib import PurePosixPath

    from zsnli.compare.service.settings import BakeoffSettings

    deployment = by_kind(render(overlay))["Deployment"]
    pod, c = deployment["spec"]["template"]["spec"], container(deployment)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    bsettings = BakeoffSettings.from_env(env_of(c))
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path in (bsettings.db_path, bsettings.key_path):
        mount = mounts[str(PurePosixPath(path).parent)]
        assert not mount.get("readOnly") and "emptyDir" in volumes[mount["name"]], path
    steps = _dockerfile()  # the image has the same defaults, in a folder its user owns
    env = " ".join(arg for op, arg in steps if op == "ENV")
    assert f"ZSNLI_BAKEOFF_DB={bsettings.db_path}" in env and f"ZSNLI_RECEIPT_KEY={bsettings.key_path}" in env
    assert any(op == "VOLUME" and "/var/lib/zsnli" in arg for op, arg in steps)
    assert any(op == "RUN" and "install -d -o 10001 -g 10001 -m 0750 /var/lib/zsnli" in arg for op, arg in steps)


def _dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    return [tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_dockerfile_serves_the_checkouts_model_offline_as_the_manifests_user():
    steps = _dockerfile()
    user = [arg for op, arg in steps if op == "USER"]
    assert user and user[-1].split(":")[0] != "0"
    pod = by_kind(render("base"))["Deployment"]["spec"]["template"]["spec"]
    assert user[-1].split(":")[0] == str(pod["securityContext"]["runAsUser"])
    copied = " ".join(arg for op, arg in steps if op == "COPY").split()
    for needed in ("model", "src", "server.py", "serve.sh", "calibration.json", "training_manifest.json"):
        assert needed in copied, needed
    env = " ".join(arg for op, arg in steps if op == "ENV")
    assert "HF_HUB_OFFLINE=1" in env and "TRANSFORMERS_OFFLINE=1" in env and "ZSNLI_MODEL_DIR=/app/model" in env
    assert [arg for op, arg in steps if op == "EXPOSE"] == [str(container(by_kind(render("base"))["Deployment"])
                                                                ["ports"][0]["containerPort"])]
    assert any(op == "RUN" and "pip install $PIP_OPTIONS ." in arg for op, arg in steps)
    assert [arg for op, arg in steps if op == "CMD"] == ['["./serve.sh"]']
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert not ignored & {"model", "src", "server.py", "serve.sh", "calibration.json", "training_manifest.json"}


def _container_test():
    """``.ci/container_test.py`` as a module (it imports ``harness_serve`` from its own folder)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        spec = importlib.util.spec_from_file_location("container_test", ROOT / ".ci" / "container_test.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    return module


def test_dockerfile_base_is_a_build_argument_defaulting_to_the_registry_image():
    text = (ROOT / "Dockerfile").read_text()
    first = next(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    assert first == "ARG BASE_IMAGE=python:3.11-slim-bookworm"
    assert [arg for op, arg in _dockerfile() if op == "FROM"] == ["${BASE_IMAGE}"]
    # every pip install goes through the image's venv and takes the local build's options
    pips = [arg for op, arg in _dockerfile() if op == "RUN" and "pip install" in arg]
    assert len(pips) == 2 and all("pip install $PIP_OPTIONS" in arg for arg in pips)
    env = " ".join(arg for op, arg in _dockerfile() if op == "ENV")
    assert "PATH=/opt/venv/bin:" in env and any(op == "RUN" and arg == "python3 -m venv /opt/venv"
                                                 for op, arg in _dockerfile())


def test_container_test_runs_the_image_as_the_manifests_do():
    ct = _container_test()
    pod, c = ct.manifest_container()
    deployment = by_kind(render("base"))["Deployment"]  # the script reads the same Deployment
    assert (pod, c) == (deployment["spec"]["template"]["spec"], container(deployment))
    volumes = {v["name"]: f"vol-{v['name']}" for v in pod["volumes"]}
    opts = ct.run_options(pod, c, volumes)
    joined = " ".join(opts)
    assert "--user 10001:10001" in joined and "--read-only --read-only-tmpfs=false" in joined
    assert "--security-opt no-new-privileges" in joined and "--cap-drop=ALL" in opts
    for name, value in env_of(c).items():
        assert f"--env {name}={value}" in joined
    for mount in c["volumeMounts"]:  # /tmp and the bake-off's /var/lib/zsnli: a volume each, nothing else writable
        assert f"-v vol-{mount['name']}:{mount['mountPath']}" in joined
    assert opts.count("-v") == len(c["volumeMounts"]) == 2
    assert "--memory 2g" in joined


def test_container_test_refuses_a_volume_it_cannot_mirror():
    ct = _container_test()
    pod, c = ct.manifest_container()
    pod = copy.deepcopy(pod)
    pod["volumes"][0] = {"name": pod["volumes"][0]["name"], "configMap": {"name": "x"}}
    with pytest.raises(ct.HarnessFailure, match="not an emptyDir"):
        ct.run_options(pod, c, {v["name"]: v["name"] for v in pod["volumes"]})


def test_container_test_takes_torch_from_a_wheel_folder_only_when_it_holds_the_cpu_wheel(tmp_path):
    ct = _container_test()
    without = ct.build_args("localhost/base:x", tmp_path)
    assert "TORCH_INDEX_URL=" not in without and f"{tmp_path}:/wheels:ro" in without
    (tmp_path / f"torch-{ct.torch_version()}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with_wheel = ct.build_args("localhost/base:x", tmp_path)
    assert with_wheel[:2] == ["--build-arg", "BASE_IMAGE=localhost/base:x"]
    assert "TORCH_INDEX_URL=" in with_wheel and "PIP_OPTIONS=--find-links /wheels" in with_wheel
    assert not any("wheels" in a or "TORCH_INDEX_URL" in a for a in ct.build_args("b", None))


def _fake_podman(tmp_path: Path, rc: int = 0) -> Path:
    """A ``podman`` that appends its arguments to ``calls.txt`` beside it and exits ``rc``."""
    exe = tmp_path / "podman"
    exe.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/calls.txt"\nexit {rc}\n')
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_container_test_removes_its_image_when_asked_passed_or_failed(tmp_path, monkeypatch, capsys, outcome):
    ct = _container_test()
    engine = ct.Engine(str(_fake_podman(tmp_path)), ["--runtime", "runc"], [])
    monkeypatch.setattr(ct, "find_engine", lambda: engine)
    monkeypatch.setattr(ct, "ensure_base", lambda e, base: False)
    monkeypatch.setattr(ct, "build_image", lambda e, base, wheels, tag: None)
    monkeypatch.setattr(ct, "image_size_mb", lambda e, tag: 2119.0)

    def run_and_check(e, tag, timeout, log):
        if outcome == "failed":
            raise ct.HarnessFailure("run", "GET /health never answered 200")
        return {"run_s": 1.0}

    monkeypatch.setattr(ct, "run_and_check", run_and_check)
    args = ["--wheels", str(tmp_path), "--tag", "localhost/zsnli:t"]
    assert ct.main(args) == (0 if outcome == "passed" else 1)  # kept: nothing removed without the flag
    assert not (tmp_path / "calls.txt").exists()
    assert ct.main([*args, "--remove-image"]) == (0 if outcome == "passed" else 1)
    assert (tmp_path / "calls.txt").read_text().splitlines() == ["--runtime runc rmi -f localhost/zsnli:t"]
    assert "container-test: image localhost/zsnli:t removed" in capsys.readouterr().out


def test_container_test_says_when_the_image_could_not_be_removed(tmp_path, capsys):
    ct = _container_test()
    ct.remove_image(ct.Engine(str(_fake_podman(tmp_path, rc=125)), [], []), "localhost/zsnli:t")
    assert capsys.readouterr().out.startswith("container-test: image localhost/zsnli:t not removed (exit 125)")


def test_ci_removes_the_container_image_before_the_harness_builds_its_environment():
    """CI's disk held .venv-ci, the image and the harness's venv at once and ran out (2026-12-07)."""
    run = (ROOT / ".ci" / "run").read_text()
    assert "python .ci/container_test.py --remove-image" in run
    assert run.index('wait "$CONTAINER_PID"') < run.index("python .ci/harness_serve.py")
    assert "export PIP_NO_CACHE_DIR=1" in run


def test_ci_runs_the_container_test():
    assert "python .ci/container_test.py" in (ROOT / ".ci" / "run").read_text()


def test_gpu_overlay_runs_the_image_built_with_a_cuda_torch():
    """The gpu overlay's image is the tag the Dockerfile's CUDA build documents (the base keeps the CPU one)."""
    if not KUBECTL:
        pytest.skip("kubectl not installed: the overlay's image needs kustomize")
    assert container(by_kind(render("gpu"))["Deployment"])["image"] == "zsnli:0.1.0-gpu"
    assert container(by_kind(render("base"))["Deployment"])["image"] == "zsnli:0.1.0"
    assert "docker build -t zsnli:0.1.0-gpu --build-arg TORCH_VARIANT=cuda ." in (ROOT / "Dockerfile").read_text()


def _torch_step(variant: str | None, index: str | None, installed_cuda: str) -> subprocess.CompletedProcess:
    """The Dockerfile's torch ``RUN`` step under ``sh`` with its ``ARG`` defaults, ``pip`` and ``python`` stubbed:
    ``pip`` echoes its arguments, ``python`` prints ``installed_cuda`` (the torch build's ``torch.version.cuda``)."""
    steps = _dockerfile()
    defaults = dict(arg.split("=", 1) for op, arg in steps if op == "ARG" and "=" in arg)
    (run,) = [arg for op, arg in steps if op == "RUN" and "TORCH_VARIANT" in arg]
    env = {**defaults, **({"TORCH_VARIANT": variant} if variant is not None else {}),
           **({"TORCH_INDEX_URL": index} if index is not None else {}), "PIP_OPTIONS": "", "CUDA": installed_cuda,
           "PATH": "/usr/bin:/bin"}
    stubs = 'pip() { echo "pip $*"; }; python() { echo "$CUDA"; }; '
    return subprocess.run(["sh", "-c", stubs + run], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("variant", "index", "cuda", "code", "pip"), [
    (None, None, "", 0, "pip install --index-url https://download.pytorch.org/whl/cpu torch=="),  # the default: CPU
    ("cuda", None, "12.8", 0, "pip install torch=="),  # CUDA from PyPI, not the CPU index
    ("cuda", "https://download.pytorch.org/whl/cu128", "12.8", 0, "--index-url https://download.pytorch.org/whl/cu128"),
    ("cpu", "", "", 0, "pip install torch=="),  # a local wheel folder (container test): PyPI plus find-links
    ("cuda", None, "", 3, "pip install torch=="),  # a CPU build came back: the build stops
    ("cpu", "", "12.8", 3, "pip install torch=="),  # a CUDA build where CPU was asked
    ("gpu", None, "", 2, None),  # not a variant: one line, nothing installed
])
def test_the_image_installs_the_torch_variant_asked_for_or_stops(variant, index, cuda, code, pip):
    proc = _torch_step(variant, index, cuda)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if pip is None:
        assert "pip install" not in proc.stdout and "TORCH_VARIANT must be cpu or cuda" in proc.stderr
    else:
        assert pip in proc.stdout
    if code == 0:
        assert f"CUDA {cuda or 'none'}" in proc.stdout
    elif code == 3:
        assert "does not match TORCH_VARIANT" in proc.stderr
