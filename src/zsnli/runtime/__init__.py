"""Runtimes: one module per backend that turns (premise, hypothesis) pairs into NLI logits.

`zsnli.runtime.model` (PyTorch, and the `NliRuntime` interface every backend meets),
`zsnli.runtime.onnx_model` (ONNX Runtime) with its exporter `zsnli.runtime.onnx_export`,
`zsnli.runtime.embedding` (the all-MiniLM-L6-v2 sentence encoder of the cosine term),
`zsnli.runtime.progress` (progress reports for long offline predictions), and
`zsnli.runtime.hub` (a model named by hub id: its pinned snapshot in the huggingface_hub cache).
"""
