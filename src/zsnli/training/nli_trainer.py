"""The NLI cross-encoder under the Hugging Face `Trainer` of `zsnli.training.trainer.train`: the label ids, the
base encoder with a new 3-way head (`load_base`), the loss (`nli_loss`), the global-batch length-grouped
sampler, the Trainer subclass (`nli_trainer_class`) and the trained model saved for serving (`save_model`, a
sentence encoder with its window: `SENTENCE_CONFIG_NAME`).

May import `zsnli.training.nli_data`, `zsnli.training.presets`, `zsnli.training.zsc_nli` and, inside
functions, torch and transformers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .nli_data import LABELS
from .presets import Preset
from .zsc_nli import NOT_ENTAILMENT

ID2LABEL = {i: name for i, name in enumerate(LABELS)}
LABEL2ID = {name: i for i, name in ID2LABEL.items()}
NOT_ENTAILMENT_ID = len(LABELS)
"""Training target id of a "not entailment" pair (`zsnli.training.zsc_nli.NOT_ENTAILMENT`); never a model label."""
TARGET_IDS = {**LABEL2ID, NOT_ENTAILMENT: NOT_ENTAILMENT_ID}


def global_length_grouped_sampler(lengths: list[int], global_batch: int, seed: int):
    """Length-grouped order of the whole dataset, the same on every rank and for any number of ranks.

    transformers' `LengthGroupedSampler` groups by the batch it is given (the per-device one under the
    Trainer) and draws its permutation from the global torch RNG, which dropout advances differently on each
    rank. Here the groups are cut for the GLOBAL batch and the permutation comes from a generator seeded with
    ``seed + epoch`` (the Trainer calls ``set_epoch``). accelerate then deals consecutive per-device batches
    to the ranks in turn, so optimiser step k sees examples ``[k*B, (k+1)*B)`` of this order whatever the
    world size: a 2-process run matches a 1-process run.
    """
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    class GlobalLengthGroupedSampler(LengthGroupedSampler):
        def __init__(self) -> None:
            super().__init__(global_batch, lengths=lengths, generator=torch.Generator())
            self.set_epoch(0)

        def set_epoch(self, epoch: int) -> None:
            self.generator.manual_seed(seed + int(epoch))

    return GlobalLengthGroupedSampler()


def nli_loss(logits, labels):
    """Mean negative log-likelihood of 3-way NLI logits with "not entailment" targets allowed.

    ``logits``: float ``[B, 3]`` in `ID2LABEL` order; ``labels``: int ``[B]`` with 0-2 the usual classes and
    `NOT_ENTAILMENT_ID` (3) meaning "neutral or contradiction", scored as
    ``-log(p(neutral) + p(contradiction))`` (the 2-way target of zero-shot classifiers trained on
    classification data, e.g. the zeroshot-classifier v2.0 recipe, learned by a 3-way head without choosing
    which of the two). With no label 3 in the batch this is exactly the mean cross-entropy the model's own
    head computes. Computed in fp32.
    """
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    picked = log_probs.gather(1, labels.clamp(max=NOT_ENTAILMENT_ID - 1).unsqueeze(1)).squeeze(1)
    not_entailment = torch.logsumexp(log_probs[:, LABEL2ID["neutral"]:], dim=-1)
    return -torch.where(labels == NOT_ENTAILMENT_ID, not_entailment, picked).mean()


def nli_trainer_class():
    """The `NliTrainer` class: a ``transformers.Trainer`` subclass, made with its arguments (imports transformers)."""
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    class NliTrainer(Trainer):
        """A Trainer with sequential evaluation, global-batch length grouping and a plain mean loss.

        * Evaluation keeps dataset order: with ``train_sampling_strategy="group_by_length"`` the stock
          Trainer (transformers 5.x) also length-groups the *evaluation* sampler, which shuffles predictions
          against any per-row bookkeeping; `accuracy_by_split` relies on order.
        * Training batches come from `global_length_grouped_sampler`.
        * The loss is `nli_loss` (label 3 = "not entailment"; plain cross-entropy otherwise).
        * ``model_accepts_loss_kwargs = False``: the sequence-classification heads take ``**kwargs`` but
          return the MEAN cross-entropy of their batch and ignore ``num_items_in_batch``. Left True, the
          Trainer (``average_tokens_across_devices``, default on) multiplies that mean by the world size, so
          DDP's gradient average becomes N times the global-batch gradient and the logged loss N times the
          true one. False gives the mean over each rank's equal share, which DDP averages into the
          global-batch mean.
        """

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs = dict(inputs)
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = nli_loss(outputs.logits, labels)
            return (loss, outputs) if return_outputs else loss

        def _get_eval_sampler(self, eval_dataset):
            if eval_dataset is None:
                return None
            return SequentialSampler(eval_dataset)

        def _get_train_sampler(self, train_dataset=None):
            # called with the column-pruned copy (no "length"); the rows and their order are train_dataset's
            a = self.args
            lengths = [int(n) for n in self.train_dataset[a.length_column_name]]
            global_batch = a.train_batch_size * a.world_size * a.gradient_accumulation_steps
            seed = a.data_seed if a.data_seed is not None else a.seed
            return global_length_grouped_sampler(lengths, global_batch, seed)

    return NliTrainer


def load_base(preset: Preset):
    """``(tokenizer, model)``: the preset's base encoder with a new 3-way head in `ID2LABEL` order (fp32 for
    training; the word embeddings frozen when the preset says so); downloads it when not cached."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(preset.base_model, revision=preset.base_revision)
    model = AutoModelForSequenceClassification.from_pretrained(
        preset.base_model, revision=preset.base_revision, num_labels=3, id2label=ID2LABEL, label2id=LABEL2ID,
        ignore_mismatched_sizes=True, dtype=torch.float32)
    if preset.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    return tokenizer, model


COMPUTE_DTYPE = "float32"
"""The dtype written as ``config.json``'s ``dtype``: the one the server computes in on CPU, whatever the
weights are stored in. transformers 5 loads a model in its config's dtype by default, so
``pipeline("zero-shot-classification", model=DIR)`` written plainly computes as the server does (fp16
storage with ``"dtype": "float16"`` made it compute in fp16: 1e-4 to 1e-2 from the server's answers). The
storage dtype is the manifest's ``training.saved_dtype``."""


#: sentence-transformers' file of a sentence encoder's settings: its ``max_seq_length`` is the window the library cuts
#: a text at when it loads the folder through its modules (its default loading reads the tokenizer's
#: ``model_max_length`` instead: `save_model` writes both).
SENTENCE_CONFIG_NAME = "sentence_bert_config.json"


def save_model(model, tokenizer, model_dir: str | Path, save_dtype: str, sentence_window: int | None = None) -> None:
    """Replace the files directly in ``model_dir`` by ``model`` (weights stored in ``save_dtype``) and
    ``tokenizer``; ``config.json``'s ``dtype`` is `COMPUTE_DTYPE` (the dtype a plain ``from_pretrained`` /
    ``pipeline`` then loads it in), not the storage dtype.

    sentence_window: for a sentence encoder, the tokens the server keeps per text
    (`zsnli.runtime.embedding.encoder_window`): saved as the tokenizer's ``model_max_length`` and as
    `SENTENCE_CONFIG_NAME`'s ``max_seq_length``, so sentence-transformers and a plain tokenizer cut a long text
    where the server does (issue 57: the library read 512 from the base's tokenizer, the server cut at 256).

    Subdirectories (the reused ``embedding/``) are kept. Every written file gets mode 644, like the rest of
    the checkout (safetensors writes 600).
    """
    import torch

    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for old in model_dir.iterdir():
        if old.is_file():
            old.unlink()
    model.to(getattr(torch, save_dtype)).save_pretrained(model_dir, safe_serialization=True)
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["dtype"] = COMPUTE_DTYPE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if sentence_window is not None:
        tokenizer.model_max_length = int(sentence_window)
        (model_dir / SENTENCE_CONFIG_NAME).write_text(json.dumps(
            {"max_seq_length": int(sentence_window), "do_lower_case": False}, indent=2) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(model_dir)
    for path in model_dir.iterdir():
        if path.is_file():
            os.chmod(path, 0o644)
