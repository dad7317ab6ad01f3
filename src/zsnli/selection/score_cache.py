"""The one pair cache: everything the served score of a document depends on, on disk (resumable) or in memory.

For every (document, hypothesis) pair of a `zsnli.selection.devsets.DevSet` the cache
holds the NLI logits, the logits of the content-free pair ("N/A", hypothesis)
and the cosine of the document with the hypothesis under the all-MiniLM-L6-v2
sentence encoder, computed with the server's own code (``NliModel.predict_logits``:
the server's tokenisation, truncation and window; ``SentenceEncoder.encode``, batched). Selection
(`zsnli.selection.search`) then scores any candidate configuration without a model.
``train.py calibrate`` (`zsnli.selection.calibration`) scores its synthetic choice tasks and the team
dev set the same way, in memory (`score_in_memory`: nothing written).

One ``<group>__<name>.npz`` plus ``.json`` per dataset under the cache
directory (``runs/score_cache`` by default, gitignored, never committed): a
killed run resumes at the first dataset whose files are missing or whose key
(data file digests, subsample size and seed, model digests) differs.

CLI::

    python -m zsnli.selection.score_cache --zsc-dev-dir ../shared/data/zsc-dev \
        --examples dev/zeroshot_dev.jsonl [--examples-group dev] [--out runs/score_cache] \
        [--max-rows 300] [--max-rows-for clinc150_intent40=120 --max-rows-for bbc_news=60]

Imports: numpy, ``zsnli.selection.devsets``, ``zsnli.manifest``, ``zsnli.harness.cli`` (the parser),
``zsnli.training.usage`` (the flag checks; torch only to check ``--device``), ``zsnli.runtime.progress``; the model classes of ``zsnli.runtime`` are imported only when computing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .devsets import DevSet, DevSetError, list_zsc_dev, read_examples, read_zsc_dev, stratified_subsample
from .premise_windows import PremiseWindows, window_logits
from ..harness.cli import UsageParser, non_negative_int, path_type, positive_int, usage_error
from ..manifest import runs_path, sha256_file
from ..training.usage import (UsageError, check_device_arg, check_file_arg, check_folder_arg, check_nli_model_dir,
                              check_output_folder_arg)

logger = logging.getLogger(__name__)

CONTENT_FREE_PREMISE = "N/A"
"""The content-free premise whose scores are cached (the one calibration.json uses)."""


def default_cache_dir() -> Path:
    """``runs/score_cache`` (or under ``$ZSNLI_RUNS_DIR``: `zsnli.manifest.runs_path`), the default cache folder."""
    return Path(runs_path("score_cache"))


CACHE_VERSION = 1


@dataclass(frozen=True)
class CachedSet:
    """The cached scores of one dataset, flat over its N rows' K_i labels (P = sum K_i pairs).

    name, group (``"zsc-dev"``, ``"dev"``, ``"public"``...), task_kind, classes: as in `DevSet`.
    hypotheses: the distinct hypotheses; hyp_index int ``[P]`` points into it.
    k: int ``[N]`` labels per row; gold: int ``[N]`` gold index within the row.
    label_classes: int ``[P]``; logits, cf_logits: float32 ``[P, 3]``; cosine: float32 ``[P]``.
    premise_tokens: int ``[N]``, each document's tokens (`zsnli.runtime.model.NliRuntime.premise_tokens`).
    entail_idx, contra_idx: positions of entailment / contradiction in the logits.
    meta: the key and provenance written next to the arrays (file digests, sizes).
    """

    name: str
    group: str
    task_kind: str
    classes: list[str]
    hypotheses: list[str]
    hyp_index: np.ndarray
    k: np.ndarray
    gold: np.ndarray
    label_classes: np.ndarray
    logits: np.ndarray
    cf_logits: np.ndarray
    cosine: np.ndarray
    entail_idx: int
    contra_idx: int
    meta: dict[str, Any]
    premise_tokens: np.ndarray | None = None

    @property
    def offsets(self) -> np.ndarray:
        """int ``[N + 1]``: row i's pairs are ``offsets[i]:offsets[i+1]``."""
        return np.concatenate([[0], np.cumsum(self.k)])

    def __len__(self) -> int:
        return int(self.k.size)


def _stem(group: str, name: str) -> str:
    return f"{group}__{name}"


def cache_key(ds: DevSet, group: str, max_rows: int, seed: int, model_digest: str, embedding_digest: str) -> dict[str, Any]:
    """What a cached dataset depends on: any change invalidates it."""
    files = {Path(p).name: digest for p, digest in sorted(ds.files.items())}  # by name: the cache follows the data
    return {"version": CACHE_VERSION, "group": group, "name": ds.name, "files": files,
            "max_rows": int(max_rows), "seed": int(seed), "model_digest": model_digest,
            "embedding_digest": embedding_digest, "content_free_premise": CONTENT_FREE_PREMISE}


def load_cached(cache_dir: str | Path, group: str, name: str, key: dict[str, Any] | None = None) -> CachedSet | None:
    """The cached set, or None when absent or (with ``key``) computed under another key."""
    stem = Path(cache_dir) / _stem(group, name)
    npz, meta_path = stem.with_suffix(".npz"), stem.with_suffix(".json")
    if not (npz.is_file() and meta_path.is_file()):
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if key is not None and meta.get("key") != key:
        return None
    with np.load(npz) as arrays:
        a = {k: arrays[k] for k in arrays.files}
    return _cached_set(name, group, meta, a)


def _cached_set(name: str, group: str, meta: dict[str, Any], a: dict[str, np.ndarray]) -> CachedSet:
    return CachedSet(name=name, group=group, task_kind=meta["task_kind"], classes=meta["classes"],
                     hypotheses=meta["hypotheses"], hyp_index=a["hyp_index"], k=a["k"], gold=a["gold"],
                     label_classes=a["label_classes"], logits=a["logits"], cf_logits=a["cf_logits"],
                     cosine=a["cosine"], entail_idx=int(meta["entail_idx"]), contra_idx=int(meta["contra_idx"]),
                     meta=meta, premise_tokens=a.get("premise_tokens"))


def load_all(cache_dir: str | Path, group: str | None = None) -> dict[str, CachedSet]:
    """Every cached set under ``cache_dir`` (of one ``group`` if given), keyed ``group/name``."""
    out: dict[str, CachedSet] = {}
    for meta_path in sorted(Path(cache_dir).glob("*__*.json")):
        g, name = meta_path.stem.split("__", 1)
        if group is None or g == group:
            cached = load_cached(cache_dir, g, name)
            if cached is not None:
                out[f"{g}/{name}"] = cached
    return out


def compute_set(ds: DevSet, nli, encoder, windows: PremiseWindows | None = None) -> dict[str, np.ndarray]:
    """NLI logits, content-free logits and cosines of every pair of ``ds`` (arrays of `CachedSet`), with progress.

    nli: a loaded ``zsnli.runtime.model.NliRuntime``; encoder: a ``zsnli.runtime.embedding.SentenceEncoder``,
    or None (no cosine term: the cosines are 0); windows: read each premise as `PremiseWindows` (None: the
    server's reading, one pair cut to the model window; ``window_pairs`` then counts the pairs scored).
    Raises ``ValueError`` when a logit or cosine is not finite.
    """
    from ..runtime.progress import predict_logits

    hyps = list(dict.fromkeys(h for row in ds.hypotheses for h in row))
    index = {h: i for i, h in enumerate(hyps)}
    premises = [t for t, row in zip(ds.texts, ds.hypotheses) for _ in row]
    flat_h = [h for row in ds.hypotheses for h in row]
    if windows is None:
        logits, scored = predict_logits(nli, premises, flat_h, desc=f"{ds.name}: NLI logits"), len(premises)
    else:
        logits, scored = window_logits(nli, ds, windows, desc=f"{ds.name}: NLI logits, windows {windows}")
    cf = predict_logits(nli, [CONTENT_FREE_PREMISE] * len(hyps), hyps, desc=f"{ds.name}: content-free logits")
    hyp_index = np.array([index[h] for h in flat_h], dtype=np.int64)
    cosine = np.zeros(len(flat_h), dtype=np.float32) if encoder is None else set_cosines(ds, encoder)
    if not (np.isfinite(logits).all() and np.isfinite(cf).all() and np.isfinite(cosine).all()):
        raise ValueError(f"{ds.name}: the model gave non-finite logits or cosines; nothing can be fitted on them")
    return {"hyp_index": hyp_index, "k": np.array([len(r) for r in ds.hypotheses], dtype=np.int64),
            "gold": ds.gold.astype(np.int64), "label_classes": np.concatenate(ds.label_classes).astype(np.int64),
            "logits": logits.astype(np.float32), "cf_logits": cf[hyp_index].astype(np.float32),
            "cosine": cosine, "row_ids": np.asarray(ds.row_ids, dtype=np.int64), "window_pairs": np.int64(scored),
            "premise_tokens": np.asarray(nli.premise_tokens(ds.texts), dtype=np.int64)}


def set_cosines(ds: DevSet, encoder) -> np.ndarray:
    """float32 ``[P]``: the cosine of each (document, hypothesis) pair of ``ds``, in `compute_set`'s pair order.

    encoder: a ``zsnli.runtime.embedding.SentenceEncoder``; texts and distinct hypotheses are embedded once each.
    """
    from ..runtime.progress import encode_texts

    hyps = list(dict.fromkeys(h for row in ds.hypotheses for h in row))
    index = {h: i for i, h in enumerate(hyps)}
    hyp_index = np.array([index[h] for row in ds.hypotheses for h in row], dtype=np.int64)
    # Embedded in batches (``SentenceEncoder.encode``, the server's encoder code); the server batches them
    # with other requests' texts and labels, which differs only by padding (masked out; measured when the
    # server embedded one text per forward, on airline_sentiment, 300 rows x 3 labels: max |difference| of
    # the cosines 1.8e-7).
    text_emb = encode_texts(encoder, ds.texts, desc=f"{ds.name}: text embeddings")
    hyp_emb = encode_texts(encoder, hyps, desc=f"{ds.name}: hypothesis embeddings")
    owner = np.repeat(np.arange(len(ds.texts)), [len(row) for row in ds.hypotheses])
    return np.einsum("pd,pd->p", text_emb[owner], hyp_emb[hyp_index]).astype(np.float32)


def _only_embedding_differs(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return old.get("embedding_digest") != new.get("embedding_digest") and \
        {k: v for k, v in old.items() if k != "embedding_digest"} == {k: v for k, v in new.items() if k != "embedding_digest"}


def _recompute_cosines(cache_dir: Path, group: str, ds: DevSet, encoder, key: dict[str, Any]) -> bool:
    """Rewrite a cached set whose key differs from ``key`` only by the embedding digest: new cosines, the
    same NLI logits (their model, data and rows are the key's). False when there is no such entry or its
    rows are not ``ds``'s."""
    stem = Path(cache_dir) / _stem(group, ds.name)
    meta_path, npz = stem.with_suffix(".json"), stem.with_suffix(".npz")
    if not (meta_path.is_file() and npz.is_file()):
        return False
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if not _only_embedding_differs(meta.get("key", {}), key):
        return False
    with np.load(npz) as stored:
        arrays = {k: stored[k] for k in stored.files}
    if "row_ids" not in arrays or not np.array_equal(arrays["row_ids"], np.asarray(ds.row_ids)):
        return False
    start = time.perf_counter()
    arrays["cosine"] = set_cosines(ds, encoder)
    if not np.isfinite(arrays["cosine"]).all():
        raise ValueError(f"{ds.name}: the encoder gave non-finite cosines; nothing can be fitted on them")
    write_cached(cache_dir, group, ds, arrays, key, int(meta["entail_idx"]), int(meta["contra_idx"]),
                 time.perf_counter() - start)
    logger.info("%s/%s: cosines recomputed with another encoder (NLI logits kept)", group, ds.name)
    return True


def score_in_memory(ds: DevSet, group: str, nli, encoder) -> CachedSet:
    """`compute_set` of ``ds`` as a `CachedSet`, kept in memory (nothing written; ``meta`` holds no key)."""
    arrays = compute_set(ds, nli, encoder)
    meta = {"task_kind": ds.task_kind, "classes": ds.classes,
            "hypotheses": list(dict.fromkeys(h for row in ds.hypotheses for h in row)),
            "entail_idx": nli.entail_idx, "contra_idx": nli.contra_idx, "n_rows": len(ds), "source": ds.source}
    return _cached_set(ds.name, group, meta, arrays)


def write_cached(cache_dir: str | Path, group: str, ds: DevSet, arrays: dict[str, np.ndarray], key: dict[str, Any],
                 entail_idx: int, contra_idx: int, seconds: float) -> None:
    """Write one dataset atomically (temporary files renamed into place, arrays first, meta last)."""
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    stem = root / _stem(group, ds.name)
    tmp = stem.with_name(stem.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, stem.with_suffix(".npz"))
    meta = {"key": key, "task_kind": ds.task_kind, "classes": ds.classes,
            "hypotheses": list(dict.fromkeys(h for row in ds.hypotheses for h in row)),
            "entail_idx": entail_idx, "contra_idx": contra_idx, "n_rows": len(ds),
            "n_pairs": int(arrays["k"].sum()), "seconds": round(seconds, 1), "source": ds.source}
    tmp_meta = stem.with_name(stem.name + ".tmp.json")
    tmp_meta.write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp_meta, stem.with_suffix(".json"))


DEFAULT_MAX_ROWS = 300
DEFAULT_MAX_ROWS_FOR = {"clinc150_intent40": 120, "bbc_news": 60}
"""Rows kept per dataset: 40 labels per document (clinc150) and ~500-token documents (bbc_news)
make those sets 5-10x slower per row; sized so that all 12 zsc-dev sets and the team dev set are
cached in ~20 minutes on the 2-core dev CPU (measured: airline_sentiment, 300 rows x 3 labels, 70 s)."""


def fill_cache(jobs: Sequence[tuple[str, DevSet]], out: str | Path, model_dir: str | Path,
               max_rows: int = DEFAULT_MAX_ROWS, max_rows_for: dict[str, int] | None = None, seed: int = 0,
               threads: int | None = None, device: str = "cpu", runtime=None,
               runtime_digest: str | None = None, embedding_dir: str | Path | None = None,
               windows: PremiseWindows | None = None) -> dict[str, CachedSet]:
    """Compute every ``(group, dataset)`` job not cached under its current key; return all, keyed ``group/name``.

    The model and encoder are loaded on ``device`` (fp32) only when something is missing. Each dataset
    is subsampled with `stratified_subsample` to ``max_rows_for.get(name, max_rows)`` rows and written as soon as it is done.
    runtime: ``f() -> NliRuntime`` scoring the pairs instead of the torch fp32 model of ``model_dir``
    (e.g. a quantised ONNX graph, docs/performance.md), with ``runtime_digest`` (its file's sha256)
    in the cache key in place of the weights' digest. Raises ``ValueError`` when only one is given.
    embedding_dir: the sentence encoder of the cosines (default `zsnli.runtime.embedding.default_embedding_dir`
    of ``model_dir``). A cached set whose key differs only by the encoder's digest keeps its NLI logits and
    gets new cosines (the NLI model is not loaded for it).
    windows: read long premises as `PremiseWindows`; the key of a set records them only when one of its
    premises makes more than one window (otherwise every pair scores as uncut, and the uncut entry serves).
    """
    if (runtime is None) != (runtime_digest is None):
        raise ValueError("runtime and runtime_digest go together")
    max_rows_for = DEFAULT_MAX_ROWS_FOR if max_rows_for is None else max_rows_for
    model_dir = Path(model_dir)
    from ..runtime.embedding import default_embedding_dir, embedding_digest

    emb_dir = Path(embedding_dir) if embedding_dir is not None else default_embedding_dir(model_dir)
    model_digest = runtime_digest or sha256_file(model_dir / "model.safetensors")
    emb_digest = embedding_digest(emb_dir)
    nli = encoder = None
    result: dict[str, CachedSet] = {}
    for group, full in jobs:
        n = max_rows_for.get(full.name, max_rows)
        key = cache_key(full, group, n, seed, model_digest, emb_digest)
        windowed = sub = None
        if windows is not None:
            if nli is None:
                nli = runtime() if runtime is not None else _load_nli(model_dir, threads, device)
            sub = stratified_subsample(full, n, seed)
            if any(len(w) > 1 for w in windows.windows_of(nli, sub)):
                windowed, key = windows, {**key, "premise_windows": str(windows)}
        cached = load_cached(out, group, full.name, key)
        if cached is None:
            ds = sub if sub is not None else stratified_subsample(full, n, seed)
            if encoder is None:
                encoder = _load_encoder(emb_dir, threads, device)
            if _recompute_cosines(Path(out), group, ds, encoder, key):
                result[f"{group}/{full.name}"] = load_cached(out, group, full.name, key)
                continue
            if nli is None:
                nli = runtime() if runtime is not None else _load_nli(model_dir, threads, device)
            start = time.perf_counter()
            arrays = compute_set(ds, nli, encoder, windowed)
            took = time.perf_counter() - start
            write_cached(out, group, ds, arrays, key, nli.entail_idx, nli.contra_idx, took)
            logger.info("%s/%s: %d rows, %d pairs in %.1f s (%.1f pairs/s)", group, full.name, len(ds),
                        int(arrays["k"].sum()), took, arrays["k"].sum() / max(took, 1e-9))
            cached = load_cached(out, group, full.name, key)
        elif cached.premise_tokens is None:  # cached before the calibrator's premise-length feature existed
            if nli is None:
                nli = runtime() if runtime is not None else _load_nli(model_dir, threads, device)
            add_premise_tokens(Path(out), group, stratified_subsample(full, n, seed), nli)
            cached = load_cached(out, group, full.name, key)
        result[f"{group}/{full.name}"] = cached
    return result


def add_premise_tokens(cache_dir: Path, group: str, ds: DevSet, nli) -> None:
    """Add the ``premise_tokens`` array to a cached set written without it (its rows must be ``ds``'s).

    Raises ``ValueError`` when the cached rows are not ``ds``'s rows."""
    npz = Path(cache_dir) / (_stem(group, ds.name) + ".npz")
    with np.load(npz) as stored:
        arrays = {k: stored[k] for k in stored.files}
    if not np.array_equal(arrays["row_ids"], np.asarray(ds.row_ids)):
        raise ValueError(f"{group}/{ds.name}: the cached rows are not the subsample's rows")
    arrays["premise_tokens"] = np.asarray(nli.premise_tokens(ds.texts), dtype=np.int64)
    tmp = npz.with_name(npz.stem + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, npz)


def _load_encoder(emb_dir: Path, threads: int | None, device: str):
    import torch

    from ..runtime.embedding import SentenceEncoder

    if threads:
        torch.set_num_threads(threads)
    return SentenceEncoder(emb_dir, device=device)


def _load_nli(model_dir: Path, threads: int | None, device: str):
    import torch

    from ..runtime.model import NliModel

    if threads:
        torch.set_num_threads(threads)
    return NliModel.load(model_dir, device=device, dtype="float32")


def parse_max_rows_for(items: Sequence[str]) -> dict[str, int]:
    """``["NAME=ROWS", ...]`` -> ``{NAME: ROWS}``; ``ValueError`` naming the item unless ROWS is an integer >= 1."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.isdigit() or int(value) < 1:
            raise ValueError(f"--max-rows-for expects NAME=ROWS with a set's NAME and ROWS >= 1, got {item!r}")
        out[name] = int(value)
    return out


def check_max_rows_for(given: dict[str, int], names: Sequence[str]) -> None:
    """Raise ``ValueError`` (one line) when a ``--max-rows-for`` NAME given (`parse_max_rows_for`) is none of the
    sets read, ``names``: a misspelled name would leave its set at the default row count unnoticed."""
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"--max-rows-for {unknown[0]}={given[unknown[0]]}: {_not_read(unknown[0], names)}")


def _not_read(name: str, names: Sequence[str]) -> str:
    """``no set named 'x' was read (sets: a, b, ...)``: the sets read, the first 12 named, for a flag's refusal."""
    shown = ", ".join(sorted(names)[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    return f"no set named {name!r} was read (sets: {shown})"


PROG = "python -m zsnli.selection.score_cache"


def _build_parser() -> UsageParser:
    """The command line of ``python -m zsnli.selection.score_cache`` (flags only; `_check_args` checks them)."""
    p = UsageParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--zsc-dev-dir", type=path_type, help="zsc-dev directory (../shared/data/zsc-dev)")
    p.add_argument("--examples", type=path_type, action="append", default=[],
                   help="examples-format file (repeatable), e.g. dev/zeroshot_dev.jsonl")
    p.add_argument("--examples-group", action="append", default=[],
                   help="cache group name of each --examples file (default: its stem)")
    p.add_argument("--out", type=path_type, default=default_cache_dir(),
                   help="cache directory (default runs/score_cache, or under $ZSNLI_RUNS_DIR)")
    p.add_argument("--model-dir", type=path_type, default=Path("model"), help="NLI model directory (default model/)")
    p.add_argument("--max-rows", type=positive_int, default=DEFAULT_MAX_ROWS, help="rows per dataset, stratified subsample")
    p.add_argument("--max-rows-for", action="append", default=[], metavar="NAME=ROWS", help="per-dataset override")
    p.add_argument("--seed", type=non_negative_int, default=0, help="subsample seed (default 0)")
    p.add_argument("--only", action="append", default=[], help="only these dataset names (repeatable; a name no set "
                   "read has is refused)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="torch device for the models: cpu, cuda, cuda:N, mps (default "
                   "cpu; fp32 either way; one this torch cannot use is refused before anything loads)")
    return p


def _jobs(args) -> list[tuple[str, DevSet]]:
    """``(group, set)`` of every set ``--zsc-dev-dir`` and ``--examples`` hold, read (``DevSetError`` on bad data;
    ``--only`` is applied by the caller)."""
    jobs: list[tuple[str, DevSet]] = []
    if args.zsc_dev_dir is not None:
        jobs += [("zsc-dev", read_zsc_dev(args.zsc_dev_dir, n)) for n in list_zsc_dev(args.zsc_dev_dir)]
    for i, path in enumerate(args.examples):
        group = args.examples_group[i] if i < len(args.examples_group) else path.stem
        jobs += [(group, ds) for ds in read_examples(path).values()]
    return jobs


def _check_args(args) -> None:
    """The checks of the flags that need no data read: each path flag (a file, a folder or missing, called so:
    `zsnli.training.usage`), more ``--examples-group`` than ``--examples``, and the ``--device`` this torch cannot
    use. Raises `UsageError` (one line) before any data or model is read."""
    if args.zsc_dev_dir is not None:
        check_folder_arg(args.zsc_dev_dir, "--zsc-dev-dir", "give the zsc-dev folder, e.g. ../shared/data/zsc-dev")
    for path in args.examples:
        check_file_arg(path, "--examples", "give an examples-format .jsonl file, e.g. dev/zeroshot_dev.jsonl")
    if len(args.examples_group) > len(args.examples):
        raise UsageError(f"--examples-group given {len(args.examples_group)} times for {len(args.examples)} "
                         "--examples file(s): one group name per --examples, in the same order")
    check_nli_model_dir(args.model_dir)
    check_output_folder_arg(args.out, "--out")
    check_device_arg(args.device)


def _check_only(only: Sequence[str], names: Sequence[str]) -> None:
    """``ValueError`` naming the first ``--only`` name that no set read has (with the names read), so a misspelt
    name never leaves the cache with fewer sets than asked for and exit 0."""
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ValueError(f"--only {unknown[0]}: {_not_read(unknown[0], names)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Fill the cache; returns the exit status (2 with one line on a flag or data mistake, before any scoring)."""
    args = _build_parser().parse_args(argv)
    try:
        _check_args(args)
        given = parse_max_rows_for(args.max_rows_for)
        overrides = {**DEFAULT_MAX_ROWS_FOR, **given}
        read = _jobs(args)
        _check_only(args.only, [ds.name for _, ds in read])
        jobs = [(g, ds) for g, ds in read if not args.only or ds.name in args.only]
        if not jobs:
            raise ValueError("nothing to cache: give --zsc-dev-dir and/or --examples")
        check_max_rows_for(given, [ds.name for _, ds in jobs])
    except (ValueError, DevSetError, UsageError) as exc:
        return usage_error(PROG, str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    fill_cache(jobs, args.out, args.model_dir, args.max_rows, overrides, args.seed, args.threads, args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
