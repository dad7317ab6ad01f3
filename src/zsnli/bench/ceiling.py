"""The compute ceiling of a benchmark run: measured matmul rate, parameter counts, FLOPs per pair.

The compute ceiling
-------------------
A transformer encoder's forward pass costs about ``2 N`` FLOPs per token,
where ``N`` is the number of non-embedding parameters (one multiply and one
add per weight per token): Kaplan et al. 2020, "Scaling Laws for Neural
Language Models", arXiv:2001.08361, section 2.1 / Table 1
(``C_forward ~ 2N + 2 n_layer n_ctx d_attn``). We keep the ``2N`` term and
drop the attention-context term ``2 n_layer n_ctx d_attn`` (for a pair of L
tokens it adds ``L / (12 d_model)`` relative to ``2N``: about 2 % at L = 100,
d = 384 and 5.5 % at L = 512, d = 768; DeBERTa's disentangled attention costs
somewhat more), so the ceiling is slightly optimistic for the model, i.e.
conservative for our fraction of it. Per (premise, hypothesis) pair of L real
(unpadded) tokens::

    FLOPs(pair) = 2 * P_enc * L + 2 * P_head

``P_enc``: parameters of the encoder stack (everything under the base
model's ``encoder`` except embedding tables), applied to every token;
``P_head``: the remaining non-embedding parameters (pooler, classifier),
applied once per pair. Embedding tables (word, position, token type,
DeBERTa's relative-position table) are lookups and cost nothing here.
Padding tokens are *not* counted: the ceiling is for useful work.

The rate ``R`` (FLOP/s) is measured in the same run with ``torch.matmul`` on
square matrices (``matmul_rate``). Ceiling docs/s = ``R / mean FLOPs(doc)``
where a document's FLOPs are the sum over its K pairs.

A scoring with more work per document has its own ceiling (`combined_ceiling`):
the served default adds the sentence encoder's passes over the text and each
distinct label (`embedding_token_counts`, same formula with the encoder's
parameters; the mean pooling is not counted) and, with a content-free
premise, K more pairs (`pair_token_counts` with ``premise=``).

`cpu_info` names the processor every figure was measured on (model, logical
CPUs, the vector and matrix extensions that decide fp32 / bf16 / int8 speed), and
`load_average` / `load_text` the load it ran under.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from zsnli.harness.examples import Example

#: /proc/cpuinfo flags that decide which precisions run fast (prefixes): AVX2/FMA for fp32,
#: AVX-512 (incl. BF16 and VNNI), AVX-VNNI and AMX (tiles, bf16, int8).
CPU_FLAG_PREFIXES = ("avx2", "fma", "avx512", "avx_vnni", "amx")


# --------------------------------------------------------------------------- the processor


def cpu_info(cpuinfo_path: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """The processor as a report should name it.

    Returns ``{"model" (the first ``model name``, else ``platform.processor()``), "logical_cpus"
    (``os.cpu_count()``), "flags" (the `CPU_FLAG_PREFIXES` flags present, sorted), "native_bf16"
    (``avx512_bf16`` or ``amx_bf16``), "native_int8_dot" (``avx512_vnni``, ``avx_vnni`` or
    ``amx_int8``), "source"}``. Without a readable ``cpuinfo_path`` (not Linux) the flags are empty
    and ``source`` says so.
    """
    import os
    import platform

    model, flags, source = "", set(), str(cpuinfo_path)
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        source = "unavailable (no /proc/cpuinfo)"
    kept = sorted(f for f in flags if f.startswith(CPU_FLAG_PREFIXES))
    return {
        "model": model or platform.processor() or platform.machine() or "unknown",
        "logical_cpus": os.cpu_count(),
        "flags": kept,
        "native_bf16": bool(flags & {"avx512_bf16", "amx_bf16"}),
        "native_int8_dot": bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"}),
        "source": source,
    }


#: The flags `cpu_tag` names: what fp32 (AVX2, AVX-512), bf16 and int8 dot products run on.
CPU_TAG_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_tag(info: dict[str, Any]) -> str:
    """The short form printed beside every figure: ``AMD EPYC x2: avx2 avx512f avx512_bf16 avx512_vnni, no amx``."""
    flags = [f for f in CPU_TAG_FLAGS if f in info["flags"]]
    amx = "" if any(f.startswith("amx") for f in flags) else ", no amx"
    return f"{info['model']} x{info['logical_cpus']}: {' '.join(flags) or 'flags unknown'}{amx}"


def load_average() -> float | None:
    """The 1-minute load average (``os.getloadavg``: runnable processes, averaged by the kernel), or None where
    the platform has none. Printed beside every speed ratio: on a machine shared with other jobs a ratio of two
    arms measured at different loads is the loads' ratio as much as the arms'."""
    import os

    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_text(loads: Sequence[float | None]) -> str:
    """``"load 1.52-2.10"`` (the lowest and highest of the readings; one number when they agree), or
    ``"load unknown"``."""
    known = [x for x in loads if x is not None]
    if not known:
        return "load unknown"
    low, high = min(known), max(known)
    return f"load {low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"load {low:.2f}-{high:.2f}"


def cpu_line(info: dict[str, Any]) -> str:
    """One line naming the CPU: ``AMD EPYC, 2 logical CPUs, flags avx2 avx512f ... (no amx)``."""
    flags = info["flags"]
    amx = "" if any(f.startswith("amx") for f in flags) else " (no amx)"
    return (f"{info['model']}, {info['logical_cpus']} logical CPUs, flags {' '.join(flags) or 'unknown'}{amx}")


# --------------------------------------------------------------------------- matmul rate


def matmul_rate(device: str = "cpu", dtype: str = "float32", n: int | None = None,
                min_time_s: float = 1.0, threads: int | None = None) -> dict[str, Any]:
    """Measured dense matmul throughput: ``torch.matmul`` of two ``n x n`` matrices.

    device: ``"cpu"`` or ``"cuda[:i]"``; dtype: ``"float32"``/``"bfloat16"``/``"float16"``.
    n: matrix side (default 1024 on CPU, 8192 on CUDA).
    min_time_s: keep repeating for at least this long (after one warm-up).
    threads: ``torch.set_num_threads`` for the measurement (CPU); None leaves it.
    One matmul costs ``2 n^3`` FLOPs. Returns ``{"flops_per_s" (best
    repetition), "median_flops_per_s", "n", "reps", "device", "dtype",
    "threads"}``.
    """
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    tdtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype))
    cuda = str(device).startswith("cuda")
    if n is None:
        n = 8192 if cuda else 1024
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=tdtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=tdtype)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    times: list[float] = []
    with torch.inference_mode():
        torch.matmul(a, b)
        sync()
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            sync()
            times.append(time.perf_counter() - t0)
            if time.perf_counter() - start >= min_time_s and len(times) >= 3:
                break
    flops = 2.0 * n**3
    times.sort()
    del a, b
    if cuda:
        torch.cuda.empty_cache()
    return {
        "flops_per_s": flops / times[0],
        "median_flops_per_s": flops / times[len(times) // 2],
        "n": n,
        "reps": len(times),
        "device": str(device),
        "dtype": str(tdtype).replace("torch.", ""),
        "threads": torch.get_num_threads() if not cuda else None,
    }


# --------------------------------------------------------------------------- FLOPs


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a sequence-classification model, split by how often they are applied.

    per_token: encoder-stack parameters (applied to every token).
    per_pair: other non-embedding parameters (pooler, classifier; once per pair).
    embedding: embedding tables and the embedding block (lookups; 0 FLOPs).
    """

    per_token: int
    per_pair: int
    embedding: int

    @property
    def non_embedding(self) -> int:
        """``per_token + per_pair`` (Kaplan et al.'s N)."""
        return self.per_token + self.per_pair

    def to_dict(self) -> dict[str, int]:
        """JSON-ready dict, with ``non_embedding`` added."""
        return {**asdict(self), "non_embedding": self.non_embedding}


def param_counts(model_dir: str | Path) -> ParamCounts:
    """Split a model's parameters into per-token, per-pair and embedding counts (see module docstring).

    The model is instantiated from ``config.json`` on the ``meta`` device
    (no weights read, no memory). Per-token: parameters under
    ``base_model.encoder`` that are not in an ``nn.Embedding``; embedding:
    every ``nn.Embedding`` plus ``base_model.embeddings``; per-pair: the rest.
    A model without ``base_model.encoder`` counts all non-embedding
    parameters as per-token.
    """
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    cfg = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(cfg)
    embed_ids: set[int] = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            embed_ids.update(id(p) for p in module.parameters())
    base = model.base_model
    if getattr(base, "embeddings", None) is not None:
        embed_ids.update(id(p) for p in base.embeddings.parameters())
    encoder = getattr(base, "encoder", None)
    enc_ids = {id(p) for p in encoder.parameters()} if encoder is not None else None
    per_token = per_pair = embedding = 0
    for p in model.parameters():
        if id(p) in embed_ids:
            embedding += p.numel()
        elif enc_ids is None or id(p) in enc_ids:
            per_token += p.numel()
        else:
            per_pair += p.numel()
    return ParamCounts(per_token=per_token, per_pair=per_pair, embedding=embedding)


def model_dir_window(model_dir: str | Path, cap: int = 512) -> int:
    """The pair window in tokens the server uses for ``model_dir``: `zsnli.runtime.model_config.model_window`
    over its tokenizer and config (``cap`` is the server's ZSNLI_MAX_LENGTH)."""
    from transformers import AutoConfig, AutoTokenizer

    from zsnli.runtime.model_config import model_window

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    cfg = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    return model_window(tok, cfg, cap)


class LabelTooLong(ValueError):
    """A label (hypothesis) does not fit the model window with its pair's special tokens:
    the server answers such a request 422, so the benchmark refuses it up front."""


def pair_token_counts(model_dir: str | Path, docs: Sequence[Example], max_length: int | None = None,
                      premise: str | None = None, distinct: bool = False) -> list[list[int]]:
    """Real token count of every (document, label) pair, as the model sees it.

    Pair length = special tokens + label tokens + text tokens, the text cut
    (``only_first``) so the pair fits ``max_length`` (default
    ``model_dir_window``); no padding. Texts and labels are tokenised separately
    (one batched call each), which gives the same counts as tokenising the
    pairs. ``premise``: pair each label with this text instead of the document's
    (the content-free pairs of a calibration). ``distinct``: each document's
    labels once (the server scores a repeated hypothesis once). Returns one list
    per document with one count per label (tokens).
    Raises ``LabelTooLong`` naming the first label that cannot fit.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    window = max_length or model_dir_window(model_dir)
    special = int(tok.num_special_tokens_to_add(pair=True))

    text_len = _token_lengths(tok, [d.text for d in docs] if premise is None else [premise],
                              add_special_tokens=False, truncation=False)
    label_len = _token_lengths(tok, [label for d in docs for label in d.labels], add_special_tokens=False,
                               truncation=False)
    out: list[list[int]] = []
    for d in docs:
        row = []
        for label in (dict.fromkeys(d.labels) if distinct else d.labels):
            room = window - special - label_len[label]
            if room < 1:
                raise LabelTooLong(f"label {label[:80]!r} ({label_len[label]} tokens) does not fit the "
                                   f"{window}-token window with a text token and {special} special tokens")
            row.append(special + label_len[label] + min(text_len[d.text if premise is None else premise], room))
        out.append(row)
    return out


def embedding_token_counts(embedding_dir: str | Path, docs: Sequence[Example]) -> list[list[int]]:
    """Real token count of every sequence the sentence encoder runs for a document under the
    cosine term: the text, then each distinct label, each with the encoder's special tokens and
    cut to its window (`zsnli.runtime.embedding.encoder_window`, 256 for MiniLM-L6), as
    `zsnli.runtime.embedding.SentenceEncoder.tokenize` does. Returns one list per document (tokens)."""
    from transformers import AutoConfig, AutoTokenizer

    from zsnli.runtime.embedding import encoder_window

    tok = AutoTokenizer.from_pretrained(embedding_dir, local_files_only=True)
    window = encoder_window(AutoConfig.from_pretrained(embedding_dir, local_files_only=True))
    length = _token_lengths(tok, [d.text for d in docs] + [label for d in docs for label in d.labels],
                            truncation=True, max_length=window)
    return [[length[d.text]] + [length[label] for label in dict.fromkeys(d.labels)] for d in docs]


def cascade_token_counts(counts: Sequence[Sequence[int]], min_labels: int, keep: int,
                         pruned: Sequence[bool] | None = None) -> list[list[int]]:
    """The NLI pairs left under a label cascade (`zsnli.request_scoring.Cascade`), as few tokens as they can be:
    a pruned document keeps its ``keep`` shortest pairs (the cascade keeps the ``keep`` labels the cosine
    ranks highest, at least as long), the others all of theirs.

    counts: `pair_token_counts` with ``distinct=True``. pruned: per document, whether the cascade prunes it
    (`zsnli.request_scoring.RequestScoring.pruning`, the server's rule); default: every document with
    ``min_labels`` or more distinct pairs. Returns one list per document (tokens)."""
    pruned = [len(row) >= min_labels for row in counts] if pruned is None else pruned
    return [sorted(row)[:keep] if cut else list(row) for row, cut in zip(counts, pruned)]


def first_use_token_counts(counts: Sequence[Sequence[int]], docs: Sequence[Example]) -> list[list[int]]:
    """`embedding_token_counts` with each distinct label counted at its first document only: the sentence
    encoder's work when label embeddings are kept across requests (`zsnli.serving.label_cache`, every
    label of the run held). Each document keeps its text. Returns one list per document (tokens)."""
    seen: set[str] = set()
    out = []
    for row, doc in zip(counts, docs):
        labels = list(dict.fromkeys(doc.labels))
        out.append([row[0]] + [n for label, n in zip(labels, row[1:]) if label not in seen])
        seen.update(labels)
    return out


def _token_lengths(tok, strings: Sequence[str], **options: Any) -> dict[str, int]:
    """Token count of each distinct string (``tok`` called with ``options``, 4,096 strings a call)."""
    uniq = list(dict.fromkeys(strings))
    out: dict[str, int] = {}
    for i in range(0, len(uniq), 4096):
        chunk = uniq[i:i + 4096]
        enc = tok(chunk, return_attention_mask=False, return_token_type_ids=False, **options)
        out.update(zip(chunk, (len(ids) for ids in enc["input_ids"])))
    return out


def pair_flops(tokens: int, params: ParamCounts) -> float:
    """FLOPs of one forward of one pair of ``tokens`` real tokens: ``2 * P_enc * L + 2 * P_head``."""
    return 2.0 * params.per_token * tokens + 2.0 * params.per_pair


def combined_ceiling(parts: dict[str, tuple[Sequence[Sequence[int]], ParamCounts]],
                     rate_flops_per_s: float) -> dict[str, Any]:
    """The compute ceiling of a document set whose documents run several workloads.

    parts: ``{name: (token counts per document, the parameters that run them)}``, e.g. ``"nli"``
    (`pair_token_counts`, the NLI model) and ``"embedding"`` (`embedding_token_counts`, the
    sentence encoder); every part has one entry per document, in the same order. Each sequence
    costs `pair_flops`. Returns ``{"docs", "total_flops", "flops_per_doc", "rate_flops_per_s",
    "ceiling_docs_per_s", "parts": {name: {"sequences", "tokens", "flops", "share"}}}``
    (``share``: the part's fraction of the FLOPs). Raises ``ValueError`` when the parts disagree
    on the number of documents.
    """
    sizes = {name: len(counts) for name, (counts, _) in parts.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"parts cover different numbers of documents: {sizes}")
    docs = next(iter(sizes.values()), 0)
    flops = {name: sum(pair_flops(n, params) for row in counts for n in row) for name, (counts, params) in parts.items()}
    total = sum(flops.values())
    per_doc = total / docs if docs else float("nan")
    return {
        "docs": docs,
        "total_flops": total,
        "flops_per_doc": per_doc,
        "rate_flops_per_s": rate_flops_per_s,
        "ceiling_docs_per_s": rate_flops_per_s / per_doc if docs else float("nan"),
        "parts": {name: {"sequences": sum(len(row) for row in counts), "tokens": sum(sum(row) for row in counts),
                         "flops": flops[name], "share": flops[name] / total if total else float("nan")}
                  for name, (counts, _) in parts.items()},
    }


def compute_ceiling(token_counts: Sequence[Sequence[int]], params: ParamCounts, rate_flops_per_s: float) -> dict[str, float]:
    """The compute ceiling for a document set.

    token_counts: per document, the token count of each of its pairs (``pair_token_counts``).
    rate_flops_per_s: measured matmul rate (``matmul_rate``).
    Returns ``{"total_flops", "flops_per_doc", "flops_per_pair", "mean_tokens_per_pair",
    "pairs", "docs", "ceiling_docs_per_s", "ceiling_pairs_per_s", "rate_flops_per_s"}``.
    """
    docs = len(token_counts)
    pairs = sum(len(c) for c in token_counts)
    tokens = sum(sum(c) for c in token_counts)
    total = sum(pair_flops(L, params) for c in token_counts for L in c)
    per_doc = total / docs if docs else float("nan")
    per_pair = total / pairs if pairs else float("nan")
    return {
        "docs": docs,
        "pairs": pairs,
        "mean_tokens_per_pair": tokens / pairs if pairs else float("nan"),
        "total_flops": total,
        "flops_per_doc": per_doc,
        "flops_per_pair": per_pair,
        "rate_flops_per_s": rate_flops_per_s,
        "ceiling_docs_per_s": rate_flops_per_s / per_doc if docs else float("nan"),
        "ceiling_pairs_per_s": rate_flops_per_s / per_pair if pairs else float("nan"),
    }
