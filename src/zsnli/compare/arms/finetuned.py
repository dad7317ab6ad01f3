"""The ``finetuned_encoder`` arm: SetFit on the shipped sentence encoder, on CPU, with its training cost shown.

SetFit (Tunstall et al. 2022, "Efficient Few-Shot Learning Without Prompts"): from the labelled rows draw
contrastive pairs (same label: target cosine 1; different labels: target 0), fine-tune the sentence encoder
on them with the cosine-similarity loss (mean squared error between the pair's cosine and its target), then
fit a logistic-regression head on the fine-tuned embeddings of the same rows. Per training row and
iteration one positive and one negative pair are drawn (SetFit's pair generation); the pairs are shuffled
and run in batches of ``batch_size`` with AdamW.

Budget: one fit stops at ``max_steps`` optimiser steps or ``max_fit_s`` seconds, whichever comes first, and
only the top ``trainable_layers`` transformer layers are trained (the embeddings and lower layers stay
frozen: it keeps a CPU fit to seconds and the cached weights small). Before a bake-off's first fit the arm
is told how many fits its protocol needs (`FinetunedEncoderArm.check_plan`) and refuses, with the reason,
when that is more than ``max_fits`` (leave-one-out over many examples).

Cache: a fit is stored under ``cache_dir`` (default ``$ZSNLI_FIT_CACHE`` or ``~/.cache/zsnli/fits``,
outside the tree) by the sha256 of (training rows and labels in order, parameters, encoder digest,
`FIT_VERSION`): the trained layers' weights (safetensors) and ``record.json``: the seconds the whole fit took (``fit_s``:
training, embedding the rows, the head) and the training loop alone (``train_s``), and the steps. A rerun
with the same rows replays it (the head is refitted on the replayed encoder, deterministically) instead of
training; the bake-off then reports the fit's seconds as first measured and says the fit was replayed
(`FinetunedEncoderArm.last_fit_replay`; an entry written before ``fit_s`` was recorded gives ``train_s``).

Imports numpy, scikit-learn, safetensors, torch (lazily), `zsnli.manifest` (`zsnli.manifest.sha256_json`),
`zsnli.runtime.embedding` (the encoder, its pooling and digest) and `zsnli.compare.arms`' base and few-shot
bookkeeping.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from zsnli.compare.arms.base import ArmError, register
from zsnli.compare.arms.few_shot import EmbeddingClassifier, fit_or_constant, logreg, predict_columns

FIT_VERSION = 1
"""Bumped whenever the training loop changes what a fit produces (old cache entries are then not replayed)."""


def default_cache_dir() -> Path:
    """``$ZSNLI_FIT_CACHE`` when set, else ``~/.cache/zsnli/fits``."""
    return Path(os.environ.get("ZSNLI_FIT_CACHE") or Path.home() / ".cache" / "zsnli" / "fits")


def contrastive_pairs(labels: Sequence[str], iterations: int, seed: int) -> list[tuple[int, int, float]]:
    """SetFit's pairs over row indices: per iteration and row, one positive ``(i, j, 1.0)`` (another row of its
    label, when it has one) and one negative ``(i, j, 0.0)`` (a row of another label, when there is one);
    shuffled with ``seed``. Returns ``[(i, j, target)]``."""
    rng = random.Random(seed)
    by_label: dict[str, list[int]] = {}
    for i, y in enumerate(labels):
        by_label.setdefault(y, []).append(i)
    pairs = []
    for _ in range(iterations):
        for i, y in enumerate(labels):
            same = [j for j in by_label[y] if j != i]
            other = [j for j, z in enumerate(labels) if z != y]
            if same:
                pairs.append((i, rng.choice(same), 1.0))
            if other:
                pairs.append((i, rng.choice(other), 0.0))
    rng.shuffle(pairs)
    return pairs


@register("finetuned_encoder")
class FinetunedEncoderArm(EmbeddingClassifier):
    """SetFit on the shipped sentence encoder (module docstring); CPU; a logistic head (``C``)."""

    uses_encoder = False  # it trains its own copy of the encoder: a shared one must not change under others

    def __init__(self, name: str | None = None, model_dir: str | None = None, iterations: int = 5,
                 batch_size: int = 16, learning_rate: float = 2e-5, max_steps: int = 40, max_fit_s: float = 60.0,
                 max_fits: int = 40, trainable_layers: int = 2, max_length: int = 128, C: float = 1.0,
                 seed: int = 0, cache_dir: str | None = None) -> None:
        super().__init__(name, model_dir)
        if min(iterations, batch_size, max_steps, max_fits, trainable_layers, max_length) < 1:
            raise ArmError(f"{self.name}: iterations, batch_size, max_steps, max_fits, trainable_layers and "
                           "max_length must be >= 1")
        if learning_rate <= 0 or max_fit_s <= 0 or C <= 0:
            raise ArmError(f"{self.name}: need learning_rate > 0, max_fit_s > 0 and C > 0")
        self.params = {"model_dir": model_dir, "iterations": iterations, "batch_size": batch_size,
                       "learning_rate": learning_rate, "max_steps": max_steps, "max_fit_s": max_fit_s,
                       "max_fits": max_fits, "trainable_layers": trainable_layers, "max_length": max_length,
                       "C": C, "seed": seed}
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self._replayed: float | None = None
        self.fit_log: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ plan and cache

    def check_plan(self, n_fits: int) -> None:
        """Refuse (``ArmError``) a protocol of more than ``max_fits`` fits: each may take up to ``max_fit_s``."""
        p = self.params
        if n_fits > p["max_fits"]:
            raise ArmError(f"{self.name}: the protocol needs {n_fits} fits (one per fold) and this arm trains an "
                           f"encoder in each, up to {p['max_fit_s']:g} s apiece; max_fits is {p['max_fits']}. "
                           "Give more examples per label (k-fold instead of leave-one-out) or raise max_fits")

    def _trainable(self) -> dict[str, Any]:
        """name -> parameter of the top ``trainable_layers`` layers (by the ``layer.<i>.`` in their names)."""
        import re

        named = dict(self._encoder.model.named_parameters())
        layer_of = {n: int(m.group(1)) for n in named if (m := re.search(r"\.layer\.(\d+)\.", n))}
        if not layer_of:
            raise ArmError(f"{self.name}: the encoder has no '.layer.<i>.' parameters to fine-tune")
        top = max(layer_of.values()) + 1
        keep = set(range(max(0, top - self.params["trainable_layers"]), top))
        return {n: named[n] for n, i in layer_of.items() if i in keep}

    def cache_key(self, texts: Sequence[str], labels: Sequence[str]) -> str:
        """sha256 of (rows and labels in order, parameters, encoder digest, `FIT_VERSION`)."""
        from zsnli.manifest import sha256_json

        params = {k: v for k, v in self.params.items() if k != "model_dir"}
        return sha256_json({"fit_version": FIT_VERSION, "texts": list(texts), "labels": list(labels),
                            "params": params, "encoder": self._encoder.digest})

    def last_fit_replay(self) -> float | None:
        """Seconds the last fit took when it was trained, if it was replayed from the cache; None if it trained now."""
        return self._replayed

    # ------------------------------------------------------------------ fit and predict

    def setup(self) -> None:
        super().setup()
        self._base = {n: t.detach().clone() for n, t in self._trainable().items()}

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        """Fine-tune (or replay the cached fine-tuning of) the encoder on these rows, then fit the head."""
        import torch
        from safetensors.torch import load_file, save_file

        t_fit = time.perf_counter()
        self._remember(texts, labels)
        if self._encoder is None:
            self.setup()
        key = self.cache_key(texts, labels)
        entry = self.cache_dir / key[:2] / key
        self._replayed = None
        params = self._trainable()
        if (entry / "record.json").is_file():
            record = json.loads((entry / "record.json").read_text(encoding="utf-8"))
            with torch.no_grad():
                for n, t in load_file(str(entry / "layers.safetensors")).items():
                    params[n].copy_(t)
            self._replayed = float(record.get("fit_s", record["train_s"]))  # entries before fit_s: the loop's
        else:
            with torch.no_grad():
                for n, t in self._base.items():
                    params[n].copy_(t)
            t0 = time.perf_counter()
            steps = self._train(texts, labels, params)
            record = {"train_s": time.perf_counter() - t0, "steps": steps, "rows": len(texts),
                      "encoder_sha256": self._encoder.digest, "params": {k: v for k, v in self.params.items()}}
        x = self._encoder.encode(list(texts))
        p = self.params
        self._model = fit_or_constant(logreg(p["C"], 1000, p["seed"]), x, labels, self.classes_)
        if self._replayed is None:  # stored last: an entry on disk is whole, and fit_s is this whole fit
            record["fit_s"] = time.perf_counter() - t_fit
            entry.mkdir(parents=True, exist_ok=True)
            save_file({n: t.detach().contiguous() for n, t in params.items()}, str(entry / "layers.safetensors"))
            (entry / "record.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        self.fit_log.append({"cache_key": key, "replayed": self._replayed is not None, **{
            k: record[k] for k in ("train_s", "steps")}})

    def _train(self, texts: Sequence[str], labels: Sequence[str], params: dict[str, Any]) -> int:
        """The contrastive loop; returns the optimiser steps taken (stops at ``max_steps`` or ``max_fit_s``)."""
        import torch

        from zsnli.runtime.embedding import mean_pool

        p = self.params
        torch.manual_seed(p["seed"])
        pairs = contrastive_pairs(labels, p["iterations"], p["seed"])
        if not pairs:
            return 0
        model, tok = self._encoder.model, self._encoder.tokenizer
        for t in model.parameters():
            t.requires_grad_(False)
        for t in params.values():
            t.requires_grad_(True)
        optim = torch.optim.AdamW(list(params.values()), lr=p["learning_rate"])
        deadline, steps = time.perf_counter() + p["max_fit_s"], 0
        model.train()
        try:
            for start in range(0, len(pairs), p["batch_size"]):
                if steps >= p["max_steps"] or time.perf_counter() >= deadline:
                    break
                batch = pairs[start:start + p["batch_size"]]
                rows = sorted({i for i, _, _ in batch} | {j for _, j, _ in batch})
                enc = tok([texts[i] for i in rows], padding=True, truncation=True,
                          max_length=min(p["max_length"], self._encoder.max_length), return_tensors="pt")
                vec = mean_pool(model(**enc).last_hidden_state, enc["attention_mask"])
                at = {i: k for k, i in enumerate(rows)}
                a = vec[[at[i] for i, _, _ in batch]]
                b = vec[[at[j] for _, j, _ in batch]]
                target = torch.tensor([y for _, _, y in batch], dtype=vec.dtype)
                loss = torch.nn.functional.mse_loss((a * b).sum(-1), target)
                optim.zero_grad()
                loss.backward()
                optim.step()
                steps += 1
        finally:
            model.eval()
            for t in model.parameters():
                t.requires_grad_(False)
        return steps

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        return self._to_candidates(predict_columns(self._model, self._encoder.encode(list(texts)), len(self.classes_)), labels)

    def use_encoder(self, encoder: Any) -> None:
        """Refused: this arm changes its encoder's weights, so it loads its own copy in `setup`."""
        raise ArmError(f"{self.name}: arm type {self.type_name!r} trains its own copy of the encoder")

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        ident["fit_cache"] = str(self.cache_dir)
        if self.fit_log:
            ident["fits_replayed"] = sum(f["replayed"] for f in self.fit_log)
            ident["fit_steps"] = [f["steps"] for f in self.fit_log]
        return ident
