"""zsnli.bench.throughput_gate (bench/gpu.sh): documents, model check, and a tiny CPU run of the gate.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter

from bench_support import REPO, child_env, examples_file  # noqa: F401
from zsnli.bench.throughput_gate import PUBLIC_PROFILE, gate_documents, is_deberta_v3_base, synthetic_examples


def test_gate_documents_keep_the_label_count_mix():
    examples = synthetic_examples(per_dataset=4)
    assert Counter(len(d.labels) for d in examples) == Counter({k: 4 for k, _ in PUBLIC_PROFILE.values()})
    docs = gate_documents(examples, 3 * len(examples) + 2)
    assert len(docs) == 3 * len(examples) + 2
    assert len({d.id for d in docs}) == len(docs)
    full = Counter(len(d.labels) for d in docs[: 3 * len(examples)])
    assert full == Counter({k: 12 for k, _ in PUBLIC_PROFILE.values()})
    assert all(d.text for d in examples)


def test_is_deberta_v3_base(tmp_path, bert_dir, deberta_dir):
    assert not is_deberta_v3_base(bert_dir)
    assert not is_deberta_v3_base(deberta_dir)  # deberta-v2 type, but tiny
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "hidden_size": 768,
                                                      "num_hidden_layers": 12}))
    assert is_deberta_v3_base(tmp_path)
    assert not is_deberta_v3_base(tmp_path / "missing")


def test_gpu_sh_runs_tiny_on_cpu(tmp_path, examples_file):
    out = tmp_path / "gate.json"
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu.sh"), "--tiny", "--examples", str(examples_file), "--docs", "8",
         "--warmup", "2", "--concurrency", "4", "--threads", "1", "--matmul-n", "128", "--matmul-seconds", "0.05",
         "--no-progress", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        env=child_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for needle in ("RANDOM WEIGHTS", "throughput:", "docs/s", "request seconds: mean", "p95", "GPU memory",
                   "compute ceiling", "matmul"):
        assert needle in proc.stdout, needle
    r = json.loads(out.read_text())
    assert r["docs"] == 8 and r["errors"] == {} and r["docs_per_s"] > 0
    assert r["label_counts"] == {"2": 4, "3": 2, "4": 2}
    assert r["random_weights"] is True and r["device"] == "cpu"
    assert 0 < r["fraction_of_ceiling"]
