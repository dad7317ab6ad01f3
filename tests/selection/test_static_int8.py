"""zsnli.selection.static_int8: calibration pairs from zsc-train only, which linear layers stay fp32, a static int8 graph
that ONNX Runtime runs, the argument checks, and one end-to-end run on tiny models (no figure is checked)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from zsnli.selection.static_int8 import (KEEP_CHOICES, calibration_pairs, linear_nodes, nodes_to_quantize, parse_args,  # noqa: E402
                               quantize_static_int8, verdict)

WORDS = "the team won the match bank said stock market price company profit research space computer software".split()


def write_sets(root: Path, names=("topics", "moods"), rows: int = 24) -> Path:
    """zsc-format sets (``<name>.jsonl`` + ``<name>.labels.json``) of made-up rows."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k, name in enumerate(names):
        classes = [f"{name} class {i}" for i in range(3 + k)]
        meta = {"dataset": name, "classes": classes, "hypotheses": [f"This text is about {c}." for c in classes],
                "task_kind": "topic", "source": {"note": "test"}}
        (root / f"{name}.labels.json").write_text(json.dumps(meta))
        lines = []
        for r in range(rows):
            idx = r % len(classes)
            text = " ".join(rng.choice(WORDS, 6 + r % 9)) + f" {name}"
            lines.append(json.dumps({"text": text, "label": classes[idx], "label_index": idx}))
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_calibration_pairs_come_from_the_given_sets_with_the_gold_hypothesis_first(tmp_path):
    root = write_sets(tmp_path / "train")
    premises, hyps = calibration_pairs(root, n_texts=10, hyps_per_text=2, seed=3)
    assert (premises, hyps) == calibration_pairs(root, n_texts=10, hyps_per_text=2, seed=3)  # seeded
    assert len(premises) == len(hyps) == 10 * 2
    texts = {json.loads(x)["text"]: json.loads(x) for f in root.glob("*.jsonl") for x in f.read_text().splitlines()}
    for i in range(0, len(premises), 2):
        row = texts[premises[i]]
        assert premises[i + 1] == premises[i] and hyps[i] == f"This text is about {row['label']}." != hyps[i + 1]


@pytest.fixture(scope="module")
def exported(bert_dir, tmp_path_factory):
    import onnx

    from zsnli.runtime.onnx_export import export_onnx

    path = tmp_path_factory.mktemp("int8") / "fp32.onnx"
    export_onnx(bert_dir, path, quantize=False)
    return path, onnx.load(str(path))


def test_linear_nodes_name_their_layer_and_the_head(exported):
    _, model = exported
    nodes = linear_nodes(model)
    layers = sorted({n["layer"] for n in nodes if n["layer"] is not None})
    assert len(layers) >= 2 and layers == list(range(len(layers)))
    assert any(n["head"] for n in nodes) and all(n["layer"] is None for n in nodes if n["head"])
    quantised, kept = nodes_to_quantize(model, ())
    assert kept == [] and len(quantised) == len(nodes)
    quantised, kept = nodes_to_quantize(model, KEEP_CHOICES)
    kept_nodes = [n for n in nodes if n["name"] in kept]
    assert {n["layer"] for n in kept_nodes} == {layers[0], layers[-1], None}
    assert all(n["head"] for n in kept_nodes if n["layer"] is None)
    assert set(quantised) | set(kept) == {n["name"] for n in nodes} and not set(quantised) & set(kept)
    with pytest.raises(ValueError, match="unknown part"):
        nodes_to_quantize(model, ("middle",))


def test_a_static_int8_graph_runs_and_keeps_the_asked_parts_in_fp32(exported, bert_dir, tmp_path):
    import onnx

    from zsnli.runtime.onnx_model import OnnxNliModel

    fp32_path, _ = exported
    reference = OnnxNliModel.from_file(bert_dir, fp32_path, "fp32")
    premises = ["the team won the match", "the bank said profit was good", "research on space"] * 4
    hyps = ["This text is about sport.", "This text is about business.", "about science"] * 4
    counts = {}
    with pytest.raises(ValueError, match="no linear layer to quantise"):  # the tiny model has two layers
        quantize_static_int8(fp32_path, tmp_path / "all.onnx", reference, premises, hyps, KEEP_CHOICES)
    for keep in ((), ("first", "head")):
        out = tmp_path / f"int8-{len(keep)}.onnx"
        info = quantize_static_int8(fp32_path, out, reference, premises, hyps, keep, batch_size=4)
        assert info["calibration_pairs"] == 12 and bool(info["fp32_nodes"]) == bool(keep)
        counts[keep] = int8_weight_layers(onnx.load(str(out)))
        model = OnnxNliModel.from_file(bert_dir, out, "int8-static")
        assert model.describe()["dtype"] == "int8-static" and model.describe()["onnx_sha256"] == info["sha256"]
        enc = model.encode(premises[:3], hyps[:3])
        logits = model.logits(enc)
        assert logits.shape == (3, 3) and np.all(np.isfinite(logits))
        assert np.abs(logits - reference.logits(enc)).max() < 1.0  # quantised, not broken
    _, fp32_model = exported
    assert counts[()] == len(linear_nodes(fp32_model))  # every linear layer has int8 weights
    assert 0 < counts[("first", "head")] == counts[()] - len(info["fp32_nodes"])  # but the kept ones
    with pytest.raises(ValueError, match="calibration method"):
        quantize_static_int8(fp32_path, tmp_path / "x.onnx", reference, premises, hyps, method="Magic")


def int8_weight_layers(model) -> int:
    """Linear nodes whose weight comes through a DequantizeLinear of an int8 initializer."""
    inits = {i.name: i for i in model.graph.initializer}
    dq_of_weight = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
                    and inits[n.input[0]].data_type == 3}  # onnx.TensorProto.INT8
    return sum(n.op_type in ("MatMul", "Gemm") and any(i in dq_of_weight for i in n.input) for n in model.graph.node)


def test_verdict_is_the_issues_one_point_rule():
    ref = {"mean_normalised": 40.0, "mean_ece_points": 10.0}
    assert verdict(ref, {"mean_normalised": 39.2, "mean_ece_points": 10.9})["holds_accuracy"]
    assert not verdict(ref, {"mean_normalised": 38.9, "mean_ece_points": 10.0})["holds_accuracy"]
    assert not verdict(ref, {"mean_normalised": 40.0, "mean_ece_points": 11.2})["holds_accuracy"]


def test_arguments_are_checked_in_one_line(tmp_path, bert_dir, capsys):
    train, dev = write_sets(tmp_path / "train"), write_sets(tmp_path / "dev")
    examples = tmp_path / "ex.jsonl"
    examples.write_text(json.dumps({"id": 1, "text": "a", "dataset": "d", "labels": ["x", "y"], "label": 0}) + "\n")
    base = ["--model-dir", str(bert_dir), "--zsc-train-dir", str(train), "--zsc-dev-dir", str(dev),
            "--dev-examples", str(examples)]
    args = parse_args(base)
    assert args.variants == {"int8-static": (), "int8-static-keep": ("first", "last", "head")}
    assert parse_args(base + ["--variant", "a=", "--variant", "b=head"]).variants == {"a": (), "b": ("head",)}
    for extra, needle in [(["--zsc-train-dir", str(tmp_path / "nope")], "--zsc-train-dir: no such directory"),
                          (["--variant", "a=middle"], "parts kept in fp32"),
                          (["--variant", "fp32=head"], "new plain NAME"),
                          (["--variant", "a=head", "--variant", "a=first"], "new plain NAME"),
                          (["--calibration-texts", "0"], "--calibration-texts")]:
        with pytest.raises(SystemExit) as info:
            parse_args(base + extra)
        assert info.value.code == 2
        err = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
        assert len(err) == 1 and needle in err[0], err


@pytest.mark.timeout(600)
def test_end_to_end_on_tiny_models(tmp_path, bert_dir, capsys):
    """Export, quantise, score two tiny dev sets with each runtime, measure out of fold; the report's shape only."""
    from zsnli.selection.static_int8 import main

    train, dev = write_sets(tmp_path / "train"), write_sets(tmp_path / "dev", names=("alpha", "beta", "gamma"))
    examples = tmp_path / "ex.jsonl"
    examples.write_text("".join(json.dumps({"id": i, "text": f"row {i} the team won", "dataset": "team", "labels": ["sport", "music"],
                                            "label": i % 2}) + "\n" for i in range(8)))
    out = tmp_path / "out"
    assert main(["--model-dir", str(bert_dir), "--zsc-train-dir", str(train), "--zsc-dev-dir", str(dev),
                 "--dev-examples", str(examples), "--out-dir", str(out),
                 "--variant", "keep=first,head", "--calibration-texts", "8", "--max-rows", "12",
                 "--threads", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["variants"]) == {"fp32", "keep"}
    assert report["calibration_data"] == str(train.resolve()) and report["calibration_pairs"] > 0
    for name, f in report["variants"].items():
        assert f["n_datasets"] == 3 and np.isfinite(f["mean_normalised"]) and np.isfinite(f["mean_ece_points"])
        assert set(f["datasets"]) == {"zsc-dev/alpha", "zsc-dev/beta", "zsc-dev/gamma", "dev/team"}
        if name != "fp32":
            assert isinstance(f["holds_accuracy"], bool) and f["quantisation"]["sha256"]
    assert (out / "cache-fp32").is_dir() and (out / "cache-keep").is_dir()  # one score cache per runtime
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("static int8 on") and sum("[CPU: " in x for x in lines) == 2
