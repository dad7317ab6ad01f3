#!/usr/bin/env python3
"""Build the image and run it as the Kubernetes manifests run it (issue 23, items 5 and 6).

    python3 .ci/container_test.py [--base IMAGE] [--wheels DIR] [--tag TAG] [--startup-timeout S]

Steps, each timed and printed (podman only; Docker's ``build`` has no ``-v``):

1. engine: ``podman info`` answers and a container runs. A container is
   first tried with podman's defaults, then with `FALLBACK` (runc, cgroupfs,
   ulimits below the host's: what these Firecracker VMs need). When neither
   runs, or podman is missing, it prints ONE line ``container-test: SKIP
   <reason>`` and exits 0;
2. base: ``--base`` (default `LOCAL_BASE`) is used when present, else built
   from Debian's packages with ``mmdebstrap`` (bookworm minbase, python3,
   python3-venv, ca-certificates) and ``podman import``-ed: no registry
   image is pulled. The published Dockerfile keeps ``python:3.11-slim-bookworm``
   (``ARG BASE_IMAGE``);
3. image: ``podman build --build-arg BASE_IMAGE=...``. A local wheel folder
   (``--wheels``, default ``$PIP_FIND_LINKS`` when it is a folder) is mounted
   read-only for the build only; when it holds the CPU torch wheel the build
   takes torch from it (``TORCH_INDEX_URL=``), else from PyTorch's CPU index.
   The host's CA bundle is mounted over the image's for the build only (a TLS
   proxy's CA reaches Debian's pip; nothing of it stays in the image);
4. run, with the settings of ``deploy/kubernetes/base/deployment.yaml``: its
   user and group, read-only root filesystem, all capabilities dropped, no
   privilege escalation, its env, its memory limit, and a fresh podman volume
   for each of its emptyDir volumes (``/tmp`` and ``/var/lib/zsnli``, the
   bake-off's store and key). Then ``GET /health`` 200 ``ok``, a valid
   ``POST /classify`` (the grading harness's check), one small ``POST
   /v1/bakeoff`` (stored: ``GET /v1/bakeoffs/{id}`` 200), the root filesystem
   refuses a write, SIGTERM gives exit 0, and the store and the key
   (mode 0600) are on the bake-off volume, owned by the manifests' user;
5. the image size; with ``--remove-image`` (CI: its disk is small, and the
   grading harness builds a second environment after this) the image is then
   removed, passed or failed; the base stays.

Exit 0 when every step passed or the engine cannot run containers (SKIP),
1 with one line ``container-test: FAIL <step>: <reason>`` (and the tail of the
container's log) otherwise, 2 for a bad argument. Standard library plus
PyYAML (in every environment the project's packages are installed in).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from zsnli.harness.cli import positive_float
from harness_serve import HarnessFailure, _http, _log_tail, check_classify, free_port, stop, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml"
LOCAL_BASE = "localhost/debian-python:bookworm"
# Debian packages of the local base: the interpreter the image's venv is made from, and the CA bundle.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
# What podman 4.3.1 (Debian 12) needs on these VMs: crun refuses the cgroup v1/v2 hybrid, systemd is not
# running, and root lacks CAP_SYS_RESOURCE, so podman's default rlimits (above the host's hard ones) fail.
FALLBACK = (["--runtime", "runc", "--cgroup-manager", "cgroupfs"],
            ["--ulimit", "nofile=16384:16384", "--ulimit", "nproc=8192:8192"])
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BAKEOFF = {
    "task_description": "Classify support requests as access or billing",
    "examples": [{"input": "Cannot sign in", "expected": "access"},
                 {"input": "Refund my invoice", "expected": "billing"},
                 {"input": "Login still fails", "expected": "access"},
                 {"input": "I was charged twice", "expected": "billing"}],
    "candidates": ["served", "majority"],
}


class Skip(Exception):
    """The engine cannot run containers here; the message is the one-line reason."""


class Engine:
    """``podman`` with the global flags and run flags that work here."""

    def __init__(self, exe: str, global_flags: list[str], run_flags: list[str]):
        self.exe, self.global_flags, self.run_flags = exe, global_flags, run_flags

    def cmd(self, *args: str) -> list[str]:
        return [self.exe, *self.global_flags, *args]

    def describe(self) -> str:
        return " ".join([*self.global_flags, *self.run_flags]) or "podman's defaults"


def step(name: str, cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; raises ``HarnessFailure(name, ...)`` with the output's last lines when it fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        raise HarnessFailure(name, f"{' '.join(cmd[:3])} ... still running after {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-4:]
        raise HarnessFailure(name, f"{' '.join(cmd[:3])} ... exited {proc.returncode}: {' | '.join(tail)}")
    return proc


def _probe_rootfs(folder: Path) -> None:
    """A root filesystem of ``/bin/true`` and the libraries ``ldd`` lists for it (no image needed)."""
    libs = subprocess.run(["ldd", "/bin/true"], capture_output=True, text=True, timeout=30).stdout
    for path in ["/bin/true", *re.findall(r"(/\S+)\s+\(0x", libs)]:
        target = folder / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), target)


def find_engine() -> Engine:
    """The podman invocation that runs a container here. Raises ``Skip`` with the reason when none does."""
    exe = shutil.which("podman")
    if exe is None:
        raise Skip("podman not installed (apt-get install podman mmdebstrap runc)")
    info = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        raise Skip(f"podman info failed: {_last_line(info)}")
    errors = []
    with tempfile.TemporaryDirectory(prefix="zsnli-probe-") as rootfs:
        _probe_rootfs(Path(rootfs))
        for global_flags, run_flags in (([], []), FALLBACK):
            probe = subprocess.run([exe, *global_flags, "run", "--rm", *run_flags, "--rootfs", rootfs, "/bin/true"],
                                   capture_output=True, text=True, timeout=120)
            if probe.returncode == 0:
                return Engine(exe, global_flags, run_flags)
            errors.append(f"{' '.join(global_flags + run_flags) or 'defaults'}: {_last_line(probe)}")
    raise Skip("podman cannot run a container here (" + "; ".join(errors) + ")")


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "level=warning" not in ln]
    return lines[-1].strip() if lines else f"exit {proc.returncode}"


def ensure_base(engine: Engine, base: str) -> bool:
    """Make ``base`` present: built with mmdebstrap and imported when it is `LOCAL_BASE` and missing.

    Returns True when it was built. Raises ``Skip`` without mmdebstrap, ``HarnessFailure`` when a build fails.
    """
    if subprocess.run(engine.cmd("image", "exists", base), timeout=60).returncode == 0:
        return False
    if base != LOCAL_BASE:
        raise HarnessFailure("base", f"image {base} not found (only {LOCAL_BASE} is built here)")
    if shutil.which("mmdebstrap") is None:
        raise Skip(f"mmdebstrap not installed: cannot build the base image {LOCAL_BASE} (no registry here)")
    with tempfile.TemporaryDirectory(prefix="zsnli-base-") as tmp:
        tarball = str(Path(tmp) / "rootfs.tar")
        # Documentation, manuals and translations are left out of the base (smaller, fewer files to unpack).
        excludes = [f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")]
        step("base", ["nice", "-n", "10", "mmdebstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                      "--dpkgopt=force-unsafe-io", *excludes, "bookworm", tarball], timeout=1800)
        step("base", engine.cmd("import", "--change", "CMD=/bin/bash", tarball, base), timeout=600)
    return True


def torch_version() -> str:
    """``ARG TORCH_VERSION`` of the Dockerfile."""
    match = re.search(r"^ARG TORCH_VERSION=(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    if match is None:
        raise HarnessFailure("image", "the Dockerfile has no ARG TORCH_VERSION=...")
    return match.group(1)


def build_args(base: str, wheels: Path | None) -> list[str]:
    """``podman build`` options: the base, the wheel folder (read-only) and the host's CA bundle, build only."""
    args = ["--build-arg", f"BASE_IMAGE={base}"]
    if wheels is not None:
        args += ["-v", f"{wheels}:/wheels:ro", "--build-arg", "PIP_OPTIONS=--find-links /wheels"]
        if any(wheels.glob(f"torch-{torch_version()}+cpu-*.whl")):
            args += ["--build-arg", "TORCH_INDEX_URL="]
    if HOST_CA_BUNDLE.is_file():
        args += ["-v", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
    return args


def build_image(engine: Engine, base: str, wheels: Path | None, tag: str) -> None:
    """``podman build`` of the checkout, niced (CPU is shared). Raises ``HarnessFailure``."""
    cmd = ["nice", "-n", "10", *engine.cmd("build", *engine.run_flags, *build_args(base, wheels), "-t", tag,
                                           str(ROOT))]
    step("image", cmd, timeout=3600)


def manifest_container() -> tuple[dict, dict]:
    """The Deployment's pod spec and its one container, from `DEPLOYMENT`."""
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def run_options(pod: dict, container: dict, volumes: dict[str, str]) -> list[str]:
    """``podman run`` options mirroring the manifest; ``volumes`` maps each emptyDir name to a podman volume.

    Raises ``HarnessFailure`` for a manifest setting this test cannot mirror (so it is never silently dropped).
    """
    pod_sc, sc = pod.get("securityContext", {}), container.get("securityContext", {})
    opts = ["--user", f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}"]
    if sc.get("readOnlyRootFilesystem"):
        opts += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        opts += ["--security-opt", "no-new-privileges"]
    opts += [f"--cap-drop={cap}" for cap in sc.get("capabilities", {}).get("drop", [])]
    for env in container.get("env", []):
        if "value" not in env:  # from an optional Secret (ZSNLI_API_KEY): none here, so unset, as in a pod without it
            if not env.get("valueFrom", {}).get("secretKeyRef", {}).get("optional"):
                raise HarnessFailure("manifest", f"env {env['name']}: neither a value nor an optional Secret")
            continue
        opts += ["--env", f"{env['name']}={env['value']}"]
    memory = container.get("resources", {}).get("limits", {}).get("memory")
    if memory:
        opts += ["--memory", memory.replace("Gi", "g").replace("Mi", "m")]
    kinds = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if "emptyDir" not in kinds[mount["name"]]:
            raise HarnessFailure("run", f"volume {mount['name']!r} is not an emptyDir: not mirrored here")
        opts += ["-v", f"{volumes[mount['name']]}:{mount['mountPath']}"]
    return opts


def check_bakeoff(base: str) -> dict:
    """POST `BAKEOFF`, then read it back from the store. Returns the answer; raises ``HarnessFailure``."""
    status, body = _http("POST", base + "/v1/bakeoff", BAKEOFF, timeout=300)
    if status != 200:
        raise HarnessFailure("bakeoff", f"POST /v1/bakeoff: status {status}: {str(body)[:300]}")
    if body.get("winner") not in BAKEOFF["candidates"] or not body.get("receipt", {}).get("signature"):
        raise HarnessFailure("bakeoff", f"no winner among {BAKEOFF['candidates']} or no signed receipt: {body}")
    status, stored = _http("GET", f"{base}/v1/bakeoffs/{body['id']}")
    if status != 200 or stored.get("id") != body["id"]:
        raise HarnessFailure("bakeoff", f"GET /v1/bakeoffs/{body['id']}: status {status}: {str(stored)[:300]}")
    return body


def check_root_is_read_only(engine: Engine, name: str, user: int) -> None:
    """Inside the running container: the manifests' user, and a write to the root filesystem refused."""
    uid = step("read-only", engine.cmd("exec", name, "id", "-u"), timeout=60).stdout.strip()
    if uid != str(user):
        raise HarnessFailure("read-only", f"the server runs as uid {uid}, the manifests say {user}")
    probe = subprocess.run(engine.cmd("exec", name, "touch", "/app/zsnli-write-probe"), capture_output=True,
                           text=True, timeout=60)
    if probe.returncode == 0 or "Read-only file system" not in probe.stderr:
        raise HarnessFailure("read-only", f"a write to /app was not refused as read-only: rc={probe.returncode} "
                             f"{probe.stderr.strip()!r}")


def check_store_on_volume(engine: Engine, volumes: dict[str, str], container: dict, user: int) -> None:
    """After the run: the bake-off's SQLite store and its key (mode 0600) lie on the volume mounted at their
    folder (``volumes``: manifest volume name -> podman volume), owned by ``user``."""
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    folder = str(Path(env["ZSNLI_BAKEOFF_DB"]).parent)
    mounted = [m["name"] for m in container.get("volumeMounts", []) if m["mountPath"] == folder]
    if not mounted:
        raise HarnessFailure("store", f"no volume is mounted at {folder}, the folder of ZSNLI_BAKEOFF_DB")
    mountpoint = Path(step("store", engine.cmd("volume", "inspect", "--format", "{{.Mountpoint}}",
                                               volumes[mounted[0]]), timeout=60).stdout.strip())
    for var in ("ZSNLI_BAKEOFF_DB", "ZSNLI_RECEIPT_KEY"):
        path = mountpoint / Path(env[var]).name
        if not path.is_file() or path.stat().st_uid != user:
            raise HarnessFailure("store", f"{var}={env[var]}: not on the bake-off volume ({path}) owned by {user}")
    key_mode = (mountpoint / Path(env["ZSNLI_RECEIPT_KEY"]).name).stat().st_mode & 0o777
    if key_mode != 0o600:
        raise HarnessFailure("store", f"the receipt key has mode {key_mode:o}, expected 600")


def run_and_check(engine: Engine, tag: str, startup_timeout: float, log_path: Path) -> dict[str, float]:
    """Step 4: run ``tag`` as the manifests do and check it. Returns seconds per step; raises ``HarnessFailure``."""
    pod, container = manifest_container()
    user, port = int(pod["securityContext"]["runAsUser"]), free_port()
    name = f"zsnli-container-test-{os.getpid()}"
    volumes = {v["name"]: f"{name}-{v['name']}" for v in pod.get("volumes", [])}
    times: dict[str, float] = {}
    for volume in volumes.values():
        step("run", engine.cmd("volume", "create", volume), timeout=60)
    cmd = engine.cmd("run", "--rm", "--name", name, *engine.run_flags, *run_options(pod, container, volumes),
                     "-p", f"127.0.0.1:{port}:{container['ports'][0]['containerPort']}", tag)
    base = f"http://127.0.0.1:{port}"
    try:
        with open(log_path, "wb") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                if wait_healthy(base, proc, startup_timeout).get("status") != "ok":
                    raise HarnessFailure("health", "/health 200 but status not ok")
                times["start_to_health_s"] = time.monotonic() - t0
                print(f"container-test: /classify -> {json.dumps(check_classify(base))}", flush=True)
                t1 = time.monotonic()
                answer = check_bakeoff(base)
                times["bakeoff_s"] = time.monotonic() - t1
                print(f"container-test: /v1/bakeoff -> {answer['id']} winner {answer['winner']}, stored", flush=True)
                check_root_is_read_only(engine, name, user)
                # podman run passes SIGTERM on to the server (PID 1 via serve.sh's exec): drain, then exit 0.
                times["sigterm_to_exit_s"] = stop(proc, timeout=90)
            finally:
                if proc.poll() is None:
                    subprocess.run(engine.cmd("rm", "-f", "-t", "0", name), capture_output=True, timeout=120)
                    proc.wait(timeout=120)
        check_store_on_volume(engine, volumes, container, user)
    finally:
        for volume in volumes.values():
            subprocess.run(engine.cmd("volume", "rm", "-f", volume), capture_output=True, timeout=120)
    return times


def image_size_mb(engine: Engine, tag: str) -> float:
    """The image's size as podman reports it (uncompressed layers), in MB (10^6 bytes)."""
    return int(step("size", engine.cmd("image", "inspect", "--format", "{{.Size}}", tag), timeout=60).stdout) / 1e6


def remove_image(engine: Engine, tag: str) -> None:
    """``podman rmi -f tag``: frees the image's layers (about 2 GB, docs/deployment.md). Never raises: a failure
    is one printed line, since the test's verdict is already decided."""
    try:
        proc = subprocess.run(engine.cmd("rmi", "-f", tag), capture_output=True, text=True, timeout=300)
        outcome = "removed" if proc.returncode == 0 else f"not removed ({_last_line(proc)})"
    except (OSError, subprocess.TimeoutExpired) as exc:
        outcome = f"not removed ({exc})"
    print(f"container-test: image {tag} {outcome}", flush=True)


def default_wheels() -> Path | None:
    """The first local folder in ``$PIP_FIND_LINKS`` (pip's own setting here), else None."""
    for entry in os.environ.get("PIP_FIND_LINKS", "").split():
        if Path(entry).is_dir():
            return Path(entry)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=LOCAL_BASE, help=f"BASE_IMAGE of the build (default {LOCAL_BASE}, "
                        "built with mmdebstrap when missing)")
    parser.add_argument("--wheels", type=Path, default=default_wheels(),
                        help="local wheel folder mounted into the build (default: a folder in $PIP_FIND_LINKS)")
    parser.add_argument("--tag", default="localhost/zsnli:container-test", help="tag of the built image")
    parser.add_argument("--startup-timeout", type=positive_float, default=300.0,
                        help="seconds to wait for /health 200 (the manifests' startup probe allows 300)")
    parser.add_argument("--remove-image", action="store_true",
                        help="remove the built image at the end, passed or failed (the base is kept)")
    args = parser.parse_args(argv)
    if args.wheels is not None and not args.wheels.is_dir():
        parser.exit(2, f"container-test: --wheels {args.wheels}: not an existing folder\n")
    log_path = Path(tempfile.gettempdir()) / f"container-test-{os.getpid()}.log"
    times: dict[str, float] = {}
    engine = None
    try:
        t0 = time.monotonic()
        engine = find_engine()
        times["engine_s"] = time.monotonic() - t0
        print(f"container-test: podman runs containers with {engine.describe()}", flush=True)
        t0 = time.monotonic()
        built = ensure_base(engine, args.base)
        times["base_build_s" if built else "base_present_s"] = time.monotonic() - t0
        print(f"container-test: base {args.base} {'built' if built else 'present'}; building {args.tag} ...",
              flush=True)
        t0 = time.monotonic()
        build_image(engine, args.base, args.wheels, args.tag)
        times["image_build_s"] = time.monotonic() - t0
        size = image_size_mb(engine, args.tag)
        print(f"container-test: image {args.tag} built, {size:.0f} MB", flush=True)
        times.update(run_and_check(engine, args.tag, args.startup_timeout, log_path))
    except Skip as exc:
        print(f"container-test: SKIP {exc}", flush=True)
        return 0
    except HarnessFailure as exc:
        print(f"container-test: FAIL {exc.step}: {exc}", file=sys.stderr, flush=True)
        tail = _log_tail(log_path)
        if tail:
            print(f"--- last lines of the container's log ({log_path}) ---\n{tail}", file=sys.stderr, flush=True)
        return 1
    finally:
        if args.remove_image and engine is not None:
            remove_image(engine, args.tag)
    timings = " ".join(f"{k}={v:.1f}" for k, v in times.items())
    print(f"container-test: OK image {size:.0f} MB; read-only root, manifests' user: /health 200, /classify valid, "
          f"bake-off stored on its volume, SIGTERM -> exit 0 ({timings})", flush=True)
    log_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
