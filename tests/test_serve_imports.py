"""Serving needs only the product card's packages (issue 11, part 1).

The grading harness (.ci/harness_serve.py) runs ``serve.sh`` in a venv with
only the card's packages and their dependencies. This is its fast stand-in:
``server.py`` runs in a subprocess of this venv (no ``PYTHONPATH``, so
server.py must find ``src/`` itself) with an import guard, serves a
calibrated tiny model (sentence-embedding term included), answers /health,
/classify and /docs, lists the bake-off routes (registered at no import cost: the bake-off's
arms, scikit-learn and ``cryptography`` load on its first use), and stops on SIGTERM. The guard refuses, as if absent,
every import *made by this project's code* (``zsnli.*``, server.py) of a
package outside the card's dependency closure or on `NEVER_AT_SERVE_TIME`.

Why a ``builtins.__import__`` guard rather than only a ``sys.meta_path``
finder: a module already imported by a card package (psutil by transformers)
is served from ``sys.modules`` without consulting ``sys.meta_path``, and the
card packages probe optional packages with ``importlib.util.find_spec``,
which a raising finder would break. Packages the card's own code imports are
the harness's business (it really lacks them).
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

NEVER_AT_SERVE_TIME = frozenset({
    "rich", "matplotlib", "sentence_transformers", "onnxruntime", "onnx", "prometheus_client", "cryptography",
    "selenium", "hypothesis", "fastapi_offline", "httpx", "ray", "pytest",
})
"""Never imported by the served default, whether or not the card's packages bring them: ``rich`` comes only
through transformers -> typer (a CLI library), ``httpx`` not at all (huggingface_hub uses httpx2),
``fastapi_offline`` is located for /docs, never imported. ``psutil`` is not listed: accelerate requires it."""

OPTIONAL_AT_SERVE_TIME = frozenset({"prometheus_client"})
"""Blocked like the others, but an attempt is not a failure: the server must run without them
(``GET /metrics`` answers 404 with one startup warning when prometheus_client is absent)."""

_GUARD = r'''
import builtins, importlib, json, os, runpy, signal, sys, threading, time, urllib.request

cfg = json.loads(os.environ["ZSNLI_IMPORT_GUARD"])
BLOCKED, SERVER = frozenset(cfg["blocked"]), cfg["server"]
OPTIONAL = frozenset(cfg.get("optional", ()))
attempts = []
_import, _import_module = builtins.__import__, importlib.import_module


def _check(name, importer):
    name_of = (importer or {}).get("__name__") or ""
    ours = name_of == "zsnli" or name_of.startswith("zsnli.") or (importer or {}).get("__file__") == SERVER
    top = name.partition(".")[0]
    if ours and top in BLOCKED:
        if top not in OPTIONAL:
            attempts.append(f"{top} <- {name_of}")
        raise ModuleNotFoundError(f"No module named {top!r} (import guard)", name=top)


def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0:
        _check(name, globals)
    return _import(name, globals, locals, fromlist, level)


def guarded_import_module(name, package=None):
    if not name.startswith("."):
        _check(name, sys._getframe(1).f_globals)
    return _import_module(name, package)


builtins.__import__, importlib.import_module = guarded_import, guarded_import_module


def get(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return None, str(exc)


def drive():
    result = {}
    try:
        for _ in range(1200):
            if get("/health")[0] == 200:
                break
            time.sleep(0.1)
        result["classify"] = get("/classify", {"text": "The home side won the derby 3-1.",
                                               "candidate_labels": ["sport", "business", "science"]})
        result["docs"] = get("/docs")[0]
        result["metrics"] = get("/metrics")[0]
        status, body = get("/openapi.json")
        result["paths"] = sorted(json.loads(body)["paths"]) if status == 200 else [status, body[:300]]
    finally:
        result["attempts"] = attempts
        result["modules"] = sorted({m.partition(".")[0] for m in sys.modules})
        result["zsnli_file"] = getattr(sys.modules.get("zsnli"), "__file__", None)
        with open(cfg["out"], "w") as fh:
            json.dump(result, fh)
        os.kill(os.getpid(), signal.SIGTERM)


if cfg["mode"] == "import":
    sys.path.insert(0, cfg["src"])
    try:
        import zsnli.serving.app  # noqa: F401
    finally:
        with open(cfg["out"], "w") as fh:
            json.dump({"attempts": attempts}, fh)
else:
    base = f"http://127.0.0.1:{os.environ['PORT']}"
    threading.Thread(target=drive, daemon=True).start()
    runpy.run_path(SERVER, run_name="__main__")
'''


def _card() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("harness_serve", ROOT / ".ci" / "harness_serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CARD


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def card_closure(card: tuple[str, ...]) -> set[str]:
    """Canonical names of the card's distributions and, recursively, what they require (extras excluded)."""
    from packaging.requirements import Requirement

    todo, seen = [Requirement(r).name for r in card], set()
    while todo:
        name = _canon(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def blocked_imports() -> set[str]:
    """Import names of the installed distributions outside the card's closure, plus `NEVER_AT_SERVE_TIME`."""
    closure = card_closure(_card()) | {"zsnli"}
    outside = set()
    for top, dists in md.packages_distributions().items():
        if top.isidentifier() and not any(_canon(d) in closure for d in dists):
            outside.add(top)
    return outside | NEVER_AT_SERVE_TIME


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_guarded(tmp_path: Path, mode: str, blocked: set[str], env_extra: dict[str, str]) -> tuple[int, dict, str]:
    out = tmp_path / f"guard-{mode}.json"
    script = tmp_path / "guard.py"
    script.write_text(_GUARD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZSNLI_") and k != "PYTHONPATH"}
    env.update(env_extra, ZSNLI_IMPORT_GUARD=json.dumps(
        {"blocked": sorted(blocked), "optional": sorted(OPTIONAL_AT_SERVE_TIME), "server": str(ROOT / "server.py"), "src": str(ROOT / "src"),
         "out": str(out), "mode": mode}))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    result = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, result, proc.stderr[-3000:]


def test_card_closure_is_what_the_harness_venv_gets():
    """The closure holds what `pip freeze` showed in the harness venv (psutil via accelerate, tqdm via
    transformers, pydantic via fastapi) and not the project's own extras."""
    closure = card_closure(_card())
    assert {"torch", "transformers", "accelerate", "psutil", "tqdm", "pydantic", "starlette", "scipy"} <= closure
    assert not {"onnxruntime", "selenium", "hypothesis", "fastapi-offline", "matplotlib", "zsnli"} & closure
    assert {"onnxruntime", "matplotlib", "selenium"} <= blocked_imports()


def test_import_guard_catches_a_project_import(tmp_path):
    """The guard can fail: blocking numpy (imported by zsnli.serving.app's modules) refuses the import and records it."""
    code, result, stderr = _run_guarded(tmp_path, "import", {"numpy"}, {})
    assert code != 0 and "No module named 'numpy' (import guard)" in stderr
    assert result["attempts"] and result["attempts"][0].startswith("numpy <- zsnli")


def test_serving_imports_only_card_packages(tmp_path, bert_dir):
    from zsnli.runtime.embedding import embedding_digest

    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    chosen = {"rule": "entailment_minus_contradiction", "temperature": 1.5, "k_exponent": 0.0,
              "embedding_weight": 2.0, "embedding_sha256": embedding_digest(bert_dir)}
    (tmp_path / "calibration.json").write_text(json.dumps({"chosen": chosen, "candidates": []}))
    env = {"ZSNLI_MODEL_DIR": str(model_dir), "ZSNLI_EMBEDDING_DIR": str(bert_dir), "HOST": "127.0.0.1",
           "PORT": str(_free_port()), "ZSNLI_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    code, result, stderr = _run_guarded(tmp_path, "serve", blocked_imports(), env)
    assert result, f"the guarded server wrote no result (exit {code}): {stderr}"
    assert result["attempts"] == [], f"serving imported non-card packages: {result['attempts']}"
    assert code == 0, stderr
    assert Path(result["zsnli_file"]).resolve().is_relative_to(ROOT / "src"), result["zsnli_file"]
    status, body = result["classify"]
    assert status == 200, body
    assert len(json.loads(body)["probabilities"]) == 3
    assert result["docs"] == 200
    assert result["metrics"] == 404  # prometheus_client refused by the guard: the server runs without /metrics
    # the bake-off routes are part of the served app, yet cost no import outside the card (first use only)
    assert {"/v1/bakeoff", "/v1/bakeoffs/{bakeoff_id}", "/v1/receipts/public-key"} <= set(result["paths"])
    assert not NEVER_AT_SERVE_TIME & set(result["modules"]), "imported at serve time, by whichever package"
