"""`transformers.TrainingArguments` of a preset, and the bf16 decision (`use_bf16`).

May import `zsnli.training.presets` and, inside functions, transformers.
"""

from __future__ import annotations

from pathlib import Path

from .presets import Preset


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags (``/proc/cpuinfo``, or ``cpuinfo`` text) include avx512_bf16 or amx_bf16.

    Without them, bf16 matmuls are emulated on the CPU and slower than fp32.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def use_bf16(mixed_precision: str, cuda: bool) -> bool:
    """Resolve a preset's ``mixed_precision`` (``"auto"``, ``"bf16"``, ``"no"``) to bf16 autocast on or off.

    ``"auto"``: on with CUDA, and on a CPU with native bf16 (`cpu_has_native_bf16`;
    measured on an AVX-512-bf16 EPYC, MiniLM-L6 training batch 32: 36 vs 21-25
    pairs/s in fp32). Raises ``ValueError`` for another value.
    """
    if mixed_precision not in ("auto", "bf16", "no"):
        raise ValueError(f"mixed_precision {mixed_precision!r}: choose auto, bf16 or no")
    if mixed_precision == "auto":
        return cuda or cpu_has_native_bf16()
    return mixed_precision == "bf16"


def training_arguments(preset: Preset, output_dir: Path, cuda: bool, per_device: int, distributed_cpu: bool,
                       **overrides):
    """`transformers.TrainingArguments` of the preset (bf16 autocast by `use_bf16`; TF32 and pinned memory only on CUDA).

    ``per_device``: the training batch of each model copy (`zsnli.training.data_parallel.per_device_batch`).
    ``distributed_cpu``: several processes without CUDA; they must say
    ``use_cpu`` and gloo, else accelerate sets up no process group and each
    process trains alone. ``overrides``: TrainingArguments keywords replacing these
    (the sentence-encoder run, `zsnli.training.encoder`, turns evaluation off).
    """
    from transformers import TrainingArguments

    settings = dict(
        output_dir=str(output_dir),
        num_train_epochs=preset.epochs,
        max_steps=preset.max_steps,
        per_device_train_batch_size=per_device,
        per_device_eval_batch_size=max(64, per_device),
        use_cpu=not cuda,  # also what lets bf16 autocast run on a CPU (transformers refuses bf16 otherwise)
        ddp_backend="gloo" if distributed_cpu else None,
        ddp_find_unused_parameters=False,  # every parameter of the BERT/DeBERTa-v2 heads is used (tested under gloo)
        learning_rate=preset.lr,
        warmup_steps=preset.warmup_ratio,
        weight_decay=preset.weight_decay,
        lr_scheduler_type="linear",
        bf16=use_bf16(preset.mixed_precision, cuda),
        tf32=True if cuda else None,
        train_sampling_strategy="group_by_length",
        length_column_name="length",
        eval_strategy="steps",
        eval_steps=preset.eval_steps,
        save_strategy="steps",
        save_steps=preset.eval_steps,
        save_total_limit=preset.keep_checkpoints,
        load_best_model_at_end=True,
        metric_for_best_model="mean_accuracy",
        greater_is_better=True,
        logging_steps=preset.logging_steps,
        logging_first_step=True,
        seed=preset.seed,
        data_seed=preset.seed,
        report_to="none",
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,  # on CPU pinning does nothing but warn at every evaluation
    )
    settings.update(overrides)
    return TrainingArguments(**settings)
