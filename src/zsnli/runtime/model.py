"""The NLI runtime: tokenise (premise, hypothesis) pairs, pad them, forward them to 3-way logits.

Holds `NliRuntime` (the interface every runtime implements: tokenisation,
the model window, padding and the offline ``predict_logits`` are shared
here; a runtime supplies only ``logits``), `NliModel` (the torch runtime),
the pair record `Encoded`, the one padding rule (`pad_to`, `collate`), the batch planner `plan_batches` and
the default token budget. What a model folder's config and tokenizer say (the window rule
`zsnli.runtime.model_config.model_window`, which logit is entailment: `zsnli.runtime.model_config.label_indices`)
is `zsnli.runtime.model_config`, whose names this module also offers (re-exported for existing importers).
The ONNX runtime sits beside this one in `zsnli.runtime.onnx_model`.

May import: numpy, torch and transformers (lazily, inside functions),
`zsnli.runtime.precision` (dtype names), `zsnli.runtime.devices` (where tensors go),
`zsnli.runtime.shapes` (the fixed forward shapes) and `zsnli.runtime.model_config`. It imports nothing else from
zsnli; `zsnli.scoring`, `zsnli.serving.batching` and `zsnli.serving.service` import it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .devices import placement
from .model_config import DEFAULT_MAX_LENGTH, ModelConfigError, label_indices, model_window  # noqa: F401 - re-exported
from .precision import canonical_dtype
from .shapes import FixedShapes

#: Sequences are padded to a multiple of this (tensor-core friendly shapes).
PAD_MULTIPLE = 8
# Default padded-token budget per forward batch, by device kind. CPU (2-core AMD EPYC, fp32, MiniLM-L6, 1/8 of the
# public examples, length-sorted): 16384 -> 5.92 docs/s, 8192 -> 6.53, 4096 -> 8.30, 2048 -> 8.93, 1024 -> 9.10,
# 512 -> 8.64: small batches stay in cache. Accelerator (bf16, fixed shapes): the budget sets the rows of every
# forward (`zsnli.runtime.shapes.accelerator_rows`, 8 at 4096); 16384 and no row cap (until issue 58) computed
# ~36 padded tokens per real one at concurrency 32, 4096 about 2 (fake accelerator; docs/performance.md).
CPU_TOKEN_BUDGET = 2048
ACCELERATOR_TOKEN_BUDGET = 4096


def default_token_budget(device: str) -> int:
    """Padded tokens per forward batch when none is configured.

    ``CPU_TOKEN_BUDGET`` (2048) for ``"cpu"``, ``ACCELERATOR_TOKEN_BUDGET``
    (4096) for anything else (``"cuda"``, ``"cuda:1"``, ``"mps"``). The CPU
    figure is the measured optimum above; returns an int > 0.
    """
    return CPU_TOKEN_BUDGET if str(device).split(":")[0] == "cpu" else ACCELERATOR_TOKEN_BUDGET


def pad_to(n: int, multiple: int = PAD_MULTIPLE) -> int:
    """``n`` tokens rounded up to a multiple of ``multiple`` (8): the width a pair costs in a batch row."""
    return ((n + multiple - 1) // multiple) * multiple


def plan_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group item indices into length-sorted batches under a padded-token budget.

    A batch of n items whose longest is L (rounded up to a multiple of 8)
    costs n * L tokens and is kept <= ``token_budget``; an item alone over the
    budget still forms its own batch. Returns lists of indices (longest first).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        w = pad_to(lengths[i])
        if current and max(width, w) * (len(current) + 1) > token_budget:
            batches.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, w)
    if current:
        batches.append(current)
    return batches


def collate(batch: Sequence[Encoded], pad_token_id: int, with_token_types: bool) -> dict[str, np.ndarray]:
    """Right-pad encoded sequences to the longest rounded up to a multiple of 8 (`pad_to`).

    Returns int64 numpy arrays ``[B, W]``: ``input_ids`` (padded with ``pad_token_id``),
    ``attention_mask`` (1 on real tokens) and, when ``with_token_types`` and every item has
    them, ``token_type_ids`` (0 on padding). The one padding rule of the NLI runtimes and the
    sentence encoder (`zsnli.runtime.embedding`).
    """
    n = len(batch)
    width = pad_to(max(len(e) for e in batch))
    ids = np.full((n, width), pad_token_id, dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    with_types = with_token_types and all(e.token_type_ids is not None for e in batch)
    types = np.zeros((n, width), dtype=np.int64) if with_types else None
    for row, e in enumerate(batch):
        length = len(e.input_ids)
        ids[row, :length] = e.input_ids
        mask[row, :length] = 1
        if types is not None:
            types[row, :length] = e.token_type_ids
    inputs = {"input_ids": ids, "attention_mask": mask}
    if types is not None:
        inputs["token_type_ids"] = types
    return inputs


@dataclass
class Encoded:
    """The token ids of one (premise, hypothesis) pair, ready for batching.

    input_ids: token ids including special tokens, at most the model window.
    token_type_ids: segment ids, or None when the tokenizer emits none.
    """

    input_ids: list[int]
    token_type_ids: list[int] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


class NliRuntime(ABC):
    """An NLI cross-encoder runtime: a tokenizer, a 3-way or 2-way head, a window; subclasses supply ``logits``.

    Attributes: ``tokenizer``, ``config`` (the HF config), ``backend`` (which
    runtime computes ``logits``), ``device`` (str), ``dtype``, ``entail_idx``,
    ``contra_idx`` (contradiction, or not_entailment for a 2-way head: `label_indices`), ``max_length`` (model window in tokens, including special
    tokens), ``id2label``, ``num_labels``, ``dtype_reason`` and ``shapes`` (set by the loader of the server,
    `zsnli.serving.startup.default_loader`).

    Tokenizer calls are serialised by a lock (fast tokenizers are not safe to
    reconfigure from several threads); ``logits`` may run in another thread
    concurrently with ``encode``.
    """

    backend = "abstract"

    def __init__(self, tokenizer, config, device: str, dtype, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.device = device
        self.dtype = dtype
        self.max_length = int(max_length)
        self.id2label = {int(k): str(v) for k, v in config.id2label.items()}
        self.entail_idx, self.contra_idx = label_indices(self.id2label)
        self.num_labels = len(self.id2label)
        self._tok_lock = threading.Lock()
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else 0
        self._n_special_pair = int(tokenizer.num_special_tokens_to_add(pair=True))
        self.emits_token_type_ids = "token_type_ids" in getattr(
            tokenizer, "model_input_names", ["input_ids", "token_type_ids", "attention_mask"]
        )
        #: why this dtype was chosen (`zsnli.runtime.precision.DtypeChoice.reason`), None when given directly
        self.dtype_reason: str | None = None
        #: the fixed forward shapes (`zsnli.runtime.shapes.FixedShapes`), None: each batch its own shape
        self.shapes: FixedShapes | None = None

    @abstractmethod
    def logits(self, encoded_batch: Sequence[Encoded]) -> np.ndarray:
        """Forward one batch of encoded pairs (padded with `collate`): float32 ``[B, C]`` in batch
        order (``[0, C]`` for an empty batch). Non-finite values are returned as they are."""

    def describe(self) -> dict[str, Any]:
        """What ``/health`` and the start-up log show: backend, device, dtype, architecture, window."""
        return {
            "backend": self.backend,
            "device": self.device,
            "dtype": str(self.dtype).replace("torch.", ""),
            "dtype_reason": self.dtype_reason,
            "fixed_shapes": self.shapes is not None,
            "max_rows": self.shapes.max_rows if self.shapes is not None else None,
            "architecture": (getattr(self.config, "architectures", None) or [None])[0],
            "max_length": self.max_length,
        }

    # ----------------------------------------------------------------- tokens

    def _clip_premises(self, premises: Sequence[str]) -> dict[str, str]:
        """Cut each distinct premise to the characters of its first ``max_length`` tokens.

        Pair truncation keeps fewer tokens than that, so the result is the same
        while a request's K pairs no longer re-tokenise a long document K times.
        """
        unique = list(dict.fromkeys(premises))
        if not getattr(self.tokenizer, "is_fast", False):  # no offsets: tokenise in full
            return {text: text for text in unique}
        enc = self.tokenizer(unique, add_special_tokens=False, truncation=True, max_length=self.max_length,
                             return_offsets_mapping=True, return_attention_mask=False, return_token_type_ids=False)
        clipped: dict[str, str] = {}
        for text, offsets in zip(unique, enc["offset_mapping"]):
            clipped[text] = text if len(offsets) < self.max_length else text[: max(end for _, end in offsets)]
        return clipped

    def encode(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[Encoded]:
        """Tokenise N (premise, hypothesis) pairs in one batched fast-tokenizer call.

        Truncation is ``only_first`` (the premise) to ``max_length``; callers
        must check ``hypothesis_lengths`` against ``max_hypothesis_tokens`` first
        (a hypothesis that does not fit makes the tokenizer raise). Returns N
        ``Encoded`` in input order. Raises ``ValueError`` when the list lengths differ.
        """
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses")
        if not premises:
            return []
        with self._tok_lock:
            clip = self._clip_premises(premises)
            enc = self.tokenizer([clip[p] for p in premises], list(hypotheses), truncation="only_first",
                                 max_length=self.max_length, padding=False, return_attention_mask=False,
                                 return_token_type_ids=self.emits_token_type_ids)
        ids = enc["input_ids"]
        types = enc.get("token_type_ids") if self.emits_token_type_ids else None
        if types is None:
            return [Encoded(list(i)) for i in ids]
        return [Encoded(list(i), list(t)) for i, t in zip(ids, types)]

    def hypothesis_lengths(self, hypotheses: Sequence[str]) -> list[int]:
        """Token count of each hypothesis alone, without special tokens (one batched call)."""
        if not hypotheses:
            return []
        with self._tok_lock:
            enc = self.tokenizer(list(hypotheses), add_special_tokens=False, truncation=False,
                                 return_attention_mask=False, return_token_type_ids=False, verbose=False)
        return [len(i) for i in enc["input_ids"]]

    def unknown_only(self, hypotheses: Sequence[str]) -> list[bool]:
        """Per hypothesis (alone, no special tokens): True when its tokens are the tokenizer's unknown token
        (``[UNK]``), with at most word-boundary pieces beside it (SentencePiece's lone ``▁``, byte-level BPE's
        ``Ġ``): the model cannot tell it from any other such text. Always False for a tokenizer with no
        unknown token (byte-level BPE reads every string). One batched call."""
        unk = getattr(self.tokenizer, "unk_token_id", None)
        if unk is None or not hypotheses:
            return [False] * len(hypotheses)
        with self._tok_lock:
            enc = self.tokenizer(list(hypotheses), add_special_tokens=False, truncation=False,
                                 return_attention_mask=False, return_token_type_ids=False, verbose=False)
            pieces = [self.tokenizer.convert_ids_to_tokens(ids) for ids in enc["input_ids"]]
        return [unk in ids and not any(i != unk and str(p).strip("\u2581\u0120 ") for i, p in zip(ids, toks))
                for ids, toks in zip(enc["input_ids"], pieces)]

    def premise_tokens(self, premises: Sequence[str]) -> list[int]:
        """Token count of each premise alone (no special tokens), capped at ``max_length``: the premise-length
        feature of the confidence calibrator (`zsnli.request_scoring.calibrator_features`). One batched call."""
        if not premises:
            return []
        with self._tok_lock:
            enc = self.tokenizer(list(premises), add_special_tokens=False, truncation=True,
                                 max_length=self.max_length, return_attention_mask=False,
                                 return_token_type_ids=False, verbose=False)
        return [len(i) for i in enc["input_ids"]]

    def premise_windows(self, premise: str, width: int, overlap: float, max_tokens: int) -> list[str]:
        """The premise cut into windows of ``width`` tokens (no special tokens) that overlap by the fraction
        ``overlap`` of a window, covering its first ``max_tokens`` tokens; a premise of at most ``width``
        tokens is one window, the premise itself (so it scores exactly as uncut).

        Windows start every ``max(1, round(width * (1 - overlap)))`` tokens; the last one ends at the
        (capped) end of the premise. Each window is the premise's characters from its first token's start to
        its last token's end (fast-tokenizer offsets). Raises ``ValueError`` when ``width`` < 1, ``overlap``
        is outside [0, 1) or the tokenizer has no offsets (a slow tokenizer)."""
        if width < 1 or not 0.0 <= overlap < 1.0:
            raise ValueError(f"premise windows need width >= 1 and 0 <= overlap < 1, got {width} and {overlap}")
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError("premise windows need a fast tokenizer (character offsets)")
        with self._tok_lock:
            offsets = self.tokenizer(premise, add_special_tokens=False, truncation=True, max_length=max_tokens,
                                     return_offsets_mapping=True, return_attention_mask=False,
                                     return_token_type_ids=False, verbose=False)["offset_mapping"]
        n = len(offsets)
        if n <= width:
            return [premise]
        step = max(1, round(width * (1.0 - overlap)))
        starts = list(range(0, n - width, step)) + [n - width]
        return [premise[offsets[s][0]: offsets[s + width - 1][1]] for s in starts]

    def premise_width(self, hypotheses: Sequence[str], window: int) -> int:
        """Premise tokens that fit a pair window of ``window`` tokens (special tokens included) beside the
        longest of ``hypotheses``: the width of `premise_windows` for a request with these labels. May be
        zero or negative when a hypothesis is too long for that window (callers check)."""
        return int(window) - self._n_special_pair - max(self.hypothesis_lengths(list(hypotheses)), default=0)

    def max_hypothesis_tokens(self) -> int:
        """The longest hypothesis (tokens, no specials) that leaves room for one premise token."""
        return self.max_length - self._n_special_pair - 1

    # ----------------------------------------------------------------- padding

    def collate(self, batch: Sequence[Encoded]) -> dict[str, np.ndarray]:
        """Right-pad a batch to its longest pair rounded up to a multiple of 8: `collate` with this
        tokenizer's pad id, ``token_type_ids`` when the tokenizer emits them."""
        return collate(batch, self.pad_token_id, self.emits_token_type_ids)

    # ----------------------------------------------------------------- offline

    def predict_logits(self, premises: Sequence[str], hypotheses: Sequence[str],
                       token_budget: int | None = None,
                       on_plan: Callable[[int], Callable[[int], None]] | None = None) -> np.ndarray:
        """Logits for N pairs, for offline use (calibration, benchmarks).

        Pairs are length-sorted and grouped so that each batch's padded size
        (pairs x longest length rounded to 8) stays within ``token_budget``
        (default: ``default_token_budget(self.device)``).
        Returns float32 ``[N, C]`` in input order. Hypotheses that do not fit
        the window raise ``ValueError``. ``on_plan`` (progress reporting,
        `zsnli.runtime.progress.predict_logits`): called once with the total work in
        tokens (each batch's pairs x its longest length); the callable it
        returns is called with each batch's tokens after that batch is done.
        """
        n = len(premises)
        if n != len(hypotheses):
            raise ValueError(f"{n} premises but {len(hypotheses)} hypotheses")
        out = np.zeros((n, self.num_labels), dtype=np.float32)
        if n == 0:
            return out
        limit = self.max_hypothesis_tokens()
        uniq = list(dict.fromkeys(hypotheses))
        too_long = [h for h, n_tok in zip(uniq, self.hypothesis_lengths(uniq)) if n_tok > limit]
        if too_long:
            raise ValueError(f"{len(too_long)} hypotheses do not fit the {self.max_length}-token window, "
                             f"e.g. {too_long[0][:80]!r}")
        encoded = self.encode(premises, hypotheses)
        budget = token_budget or default_token_budget(self.device)
        batches = plan_batches([len(e) for e in encoded], budget)
        cost = [len(idx) * max(len(encoded[i]) for i in idx) for idx in batches]
        advance = on_plan(sum(cost)) if on_plan is not None else None
        for idx, tokens in zip(batches, cost):
            out[idx] = self.logits([encoded[i] for i in idx])
            if advance is not None:
                advance(tokens)
        return out


def _resolve_dtype(name: str):
    import torch

    return getattr(torch, canonical_dtype(name))


def forward_in_shapes(batch: Sequence[Encoded], shapes: FixedShapes | None,
                      collate_fn: Callable[[Sequence[Encoded]], dict[str, np.ndarray]], pad_token_id: int,
                      forward: Callable[[dict[str, np.ndarray], int], np.ndarray]) -> np.ndarray:
    """Run ``forward`` over ``batch``, in batch order. ``forward(inputs, keep)``: collated int64 arrays of
    ``rows`` rows -> float32 ``[keep, C]``, the first ``keep`` rows only: it drops the filler rows on its
    device, before anything is copied to the host.

    ``shapes`` None: one forward of the batch as `collate` pads it (keep = all rows). Otherwise one forward per
    `FixedShapes.chunks` chunk, each padded to its fixed shape (`FixedShapes.fill`), keeping its real rows,
    so each row's result is the one it gets alone. Returns ``[B, C]``.
    """
    if shapes is None:
        return forward(collate_fn(batch), len(batch))
    parts: list[tuple[list[int], np.ndarray]] = []
    for width, idx in shapes.chunks([len(e) for e in batch]):
        inputs = shapes.fill(collate_fn([batch[i] for i in idx]), width, pad_token_id)
        parts.append((idx, forward(inputs, len(idx))))
    out = np.empty((len(batch), parts[0][1].shape[1]), dtype=np.float32)
    for idx, rows in parts:
        out[idx] = rows
    return out


class NliModel(NliRuntime):
    """The torch runtime: an ``AutoModelForSequenceClassification`` NLI head (``model``, eval mode)."""

    backend = "torch"

    def __init__(self, tokenizer, model, device: str, dtype, max_length: int) -> None:
        super().__init__(tokenizer, model.config, device, dtype, max_length)
        self.model = model

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None, dtype: str | None = None,
             max_length: int | None = None) -> "NliModel":
        """Load tokenizer and model from a local directory (``local_files_only``, no network).

        device: ``"cuda"``, ``"cuda:1"``, ``"cpu"``...; default CUDA when available, else CPU.
        dtype: ``"float32"``/``"bfloat16"``/``"float16"`` (aliases fp32/bf16/fp16);
            default bf16 on CUDA, fp32 on CPU. Always passed explicitly to
            ``from_pretrained`` (weights may be stored in fp16).
        max_length: cap on the model window (default 512).
        Raises ``ModelConfigError`` when id2label has no entailment label or no
        contradiction / not_entailment label (`label_indices`), ``OSError``/``ValueError`` from transformers on missing or bad files.
        """
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        model_dir = Path(model_dir)
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        label_indices(config.id2label)  # refuse early, before loading weights
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype is None:
            torch_dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
        else:
            torch_dtype = _resolve_dtype(dtype)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, local_files_only=True, dtype=torch_dtype)
        model.to(placement(device))
        model.eval()
        window = model_window(tokenizer, model.config, max_length or DEFAULT_MAX_LENGTH)
        return cls(tokenizer, model, str(device), torch_dtype, window)

    def logits(self, encoded_batch: Sequence[Encoded]) -> np.ndarray:
        """Forward one batch under ``torch.inference_mode``: float32 numpy ``[B, C]`` (C = 3, or 2 for a 2-way head);
        in fixed shapes when ``self.shapes`` is set (`forward_in_shapes`)."""
        import torch

        if not encoded_batch:
            return np.zeros((0, self.num_labels), dtype=np.float32)

        def forward(inputs: dict[str, np.ndarray], keep: int) -> np.ndarray:
            with torch.inference_mode():
                on = placement(self.device)
                tensors = {k: torch.from_numpy(v).to(on, non_blocking=True) for k, v in inputs.items()}
                return self.model(**tensors).logits[:keep].float().cpu().numpy()  # filler rows stay on the device

        return forward_in_shapes(encoded_batch, self.shapes, self.collate, self.pad_token_id, forward)
