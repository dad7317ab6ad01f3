"""Knowledge distillation of a teacher NLI cross-encoder into the student that `zsnli.training.trainer` trains.

Three parts, all switched on by ``train.py train --teacher DIR`` (`Distillation`):

* **The teacher's cache** (`build_cache`): the teacher's 3-way log-probabilities (`ID2LABEL` order,
  float32, natural log) of every distinct (premise, hypothesis) pair the student will see, computed once
  and kept in a folder outside the tree (one folder can serve several runs of the same teacher).
  Log-probabilities rather than probabilities: softmax(log p / T) is exactly the teacher's softmax(z / T)
  at any temperature T (log p differs from the logits z by a constant per row). The pairs are cut into chunks of `Distillation.chunk_rows` fixed by position, each written
  whole (a temporary file renamed), so a killed run resumes at the first missing chunk and its result has
  the bytes of an uninterrupted one; chunks are named by the digest of their pairs, so a run whose pairs
  start with another run's reuses its chunks. ``cache.json`` pins the teacher weights, dtype, window and
  chunk size: another teacher or setting is refused (`CacheMismatch`).
* **Augmented pairs** (`augmented_pairs`): pairs no gold label covers, scored by the teacher only:
  zsc-train texts against hypotheses of other sets' label spaces, and NLI premises against other
  premises' hypotheses (the augmented distillation of TinyBERT, Jiao et al. 2020, "TinyBERT:
  Distilling BERT for Natural Language Understanding", with pairs built by recombination instead of
  word substitution). Their label is `NO_GOLD`.
* **The loss** (`distillation_loss`, the Trainer subclass `distill_trainer_class`): Hinton et al. 2015
  ("Distilling the Knowledge in a Neural Network"): ``alpha * CE(gold) + (1 - alpha) * T^2 *
  KL(softmax(t / T) || softmax(s / T))``; the T^2 keeps the soft term's gradient scale independent of T.

The manifest's ``teacher`` entry is `teacher_entry`. The same cache also serves ``train.py encoder --loss
margin-mse`` (`zsnli.training.encoder`): its (text, hypothesis) pairs go through `build_cache` unchanged, and
`teacher_pair_scores` turns their rows into the one score per pair that Margin-MSE compares.

May import `zsnli.manifest`, `zsnli.harness.cli` (`json_problem`), `zsnli.training.nli_trainer`,
`zsnli.training.zsc_nli`, `zsnli.training.nli_data` and, inside functions, `zsnli.runtime.progress`,
`zsnli.training.manifest_writer` (the base's and the teacher's weights digests, the base's licence), numpy, torch
and transformers.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..harness.cli import json_problem
from ..manifest import FileCheck, sha256_file
from .nli_data import DataError, Source
from .nli_trainer import ID2LABEL, nli_loss, nli_trainer_class
from .zsc_nli import normalise_text, read_zsc_set

NO_GOLD = "no_gold"
"""The ``label`` of an augmented pair: no gold label, only the teacher's distribution trains it."""
NO_GOLD_ID = -100
"""Its training target id (the value transformers ignores as a label)."""
TEACHER_COLUMN = "teacher_logp"
"""The train set's column holding each row's teacher log-probabilities ``[3]``."""
CACHE_META = "cache.json"
"""The cache folder's index: what its chunks are of (teacher, dtype, window, chunk size) and its complete files."""
TEACHER_DESCRIPTION_HINT = ("the teacher run's training_manifest.json, or the JSON that its train.py train command "
                            "prints with --dry-run")


DEFAULT_CHUNK_ROWS = 384
"""Pairs per cache chunk: a chunk at most every ~8.5 minutes at the slowest rate measured for the 110M teacher
(0.77 pairs/s fp32 on the 2-core CPU at load 14-15, docs/training.md "Distillation"), so a killed run loses
less than 10 minutes."""


class CacheMismatch(DataError):
    """A cache folder holds the scores of another teacher, or of another dtype, window, batch or chunk size."""


@dataclass(frozen=True)
class Distillation:
    """What a distilling run needs besides its preset (``train.py train --teacher ...``).

    ``teacher``: the teacher's model directory (config.json with the three NLI labels, weights, tokenizer);
    ``description``: `TEACHER_DESCRIPTION_HINT` (its base, data and exclusions, for the manifest);
    ``cache_dir``: the cache folder (outside the checkout); ``alpha``: weight of the gold cross-entropy
    (1 = the plain NLI loss); ``temperature``: T of the soft term; ``augment``: augmented pairs as a
    multiple of the gold train pairs (0 = gold pairs only); ``batch_size`` and ``chunk_rows``: the
    teacher's forward batch and the pairs per cache chunk (`DEFAULT_CHUNK_ROWS`); ``bf16``: bf16
    autocast for the teacher's forward; ``cache_only``: build the cache and stop before training.
    ``train.py encoder --loss margin-mse`` uses the teacher, description, cache and forward fields only (alpha,
    temperature and augment are this module's NLI loss and stay at their defaults there).
    """

    teacher: str
    description: str
    cache_dir: str
    alpha: float = 0.5
    temperature: float = 2.0
    augment: float = 0.0
    batch_size: int = 32
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    bf16: bool = False
    cache_only: bool = False

    def hyperparameters(self) -> dict[str, Any]:
        """The settings recorded in the manifest's ``teacher`` entry."""
        return {k: v for k, v in asdict(self).items() if k not in ("teacher", "description", "cache_dir", "cache_only")}


# --------------------------------------------------------------------------- augmented pairs


def _zsc_pool(sources: Sequence[Source], exclude: set[str]) -> list[tuple[list[str], list[str]]]:
    """Per zsc set: its texts outside ``exclude`` and its hypotheses."""
    pool = []
    for src in sources:
        zset = read_zsc_set(src.path)
        texts = sorted({t for t in zset.texts if normalise_text(t) not in exclude})
        if texts:
            pool.append((texts, list(zset.hypotheses)))
    return pool


def augmented_pairs(nli_rows: Sequence[dict[str, str]], zsc_sources: Sequence[Source], exclude: set[str],
                    n: int, seed: int) -> list[dict[str, str]]:
    """``n`` pairs (about half of each kind when zsc sets are given) that no gold label covers, label `NO_GOLD`.

    * a zsc-train text of one set against a hypothesis of another set's label space (never one of its own
      set's hypotheses);
    * an NLI premise against the hypothesis of a row with another premise (never a pair of ``nli_rows``).

    Drawn with ``random.Random(seed)``; a premise or hypothesis whose `normalise_text` is in ``exclude``
    (`zsnli.training.zsc_nli.texts_of` the choosing and reporting data) is never used. Returns fewer than
    ``n`` when no pair can be drawn (fewer than two sets, or fewer than two NLI premises) or when
    ``20 n + 1000`` draws found fewer (label spaces that share their hypotheses, premises paired with every
    hypothesis already). Rows ``{"premise", "hypothesis", "label"}``; duplicates are not removed (the cache scores each once).
    """
    rng = random.Random(seed)
    pool = _zsc_pool(zsc_sources, exclude) if len(zsc_sources) > 1 else []
    nli = [r for r in nli_rows if normalise_text(r["premise"]) not in exclude
           and normalise_text(r["hypothesis"]) not in exclude]
    can_nli = len({r["premise"] for r in nli}) > 1
    n_zsc = (n if not can_nli else n // 2) if len(pool) > 1 else 0
    rows: list[dict[str, str]] = []
    draws = 20 * n + 1000
    while len(rows) < n_zsc and draws > 0:
        draws -= 1
        a, b = rng.sample(range(len(pool)), 2)
        hypothesis = rng.choice(pool[b][1])
        if normalise_text(hypothesis) not in exclude and hypothesis not in pool[a][1]:
            rows.append({"premise": rng.choice(pool[a][0]), "hypothesis": hypothesis, "label": NO_GOLD})
    gold = {(r["premise"], r["hypothesis"]) for r in nli}
    while can_nli and len(rows) < n and draws > 0:
        draws -= 1
        a, b = rng.choice(nli), rng.choice(nli)
        if a["premise"] != b["premise"] and (a["premise"], b["hypothesis"]) not in gold:
            rows.append({"premise": a["premise"], "hypothesis": b["hypothesis"], "label": NO_GOLD})
    return rows


# --------------------------------------------------------------------------- the teacher's cache


def unique_pairs(rows: Sequence[dict[str, str]]) -> list[tuple[str, str]]:
    """The distinct (premise, hypothesis) pairs of ``rows`` in order of first appearance."""
    return list(dict.fromkeys((r["premise"], r["hypothesis"]) for r in rows))


def pairs_digest(pairs: Sequence[tuple[str, str]]) -> str:
    """sha256 of the pairs in order (each as its JSON array on one line): what a cache is of."""
    h = hashlib.sha256()
    for pair in pairs:
        h.update(json.dumps(pair, ensure_ascii=False).encode("utf-8") + b"\n")
    return h.hexdigest()


def label_order(config: dict[str, Any]) -> list[int]:
    """Indices of the teacher's logits in `ID2LABEL` order, read from its ``config.json`` ``id2label``.

    Raises `DataError` when the teacher's labels are not entailment, neutral and contradiction."""
    names = {str(v).lower(): int(k) for k, v in config.get("id2label", {}).items()}
    missing = [name for name in ID2LABEL.values() if name not in names]
    if missing or len(names) != len(ID2LABEL):
        raise DataError(f"the teacher's id2label {config.get('id2label')} is not the three NLI labels "
                        f"({', '.join(ID2LABEL.values())})")
    return [names[name] for name in ID2LABEL.values()]


def teacher_log_probs(model, tokenizer, pairs: Sequence[tuple[str, str]], batch_size: int, max_length: int,
                      bf16: bool, order: Sequence[int], on_batch: Callable[[int], None] | None = None):
    """The teacher's log-probabilities of ``pairs``: float32 ``[len(pairs), 3]`` in `ID2LABEL` order.

    Batches are consecutive ``batch_size`` slices of ``pairs`` (so a chunk's result depends only on its
    pairs); each is padded to its longest pair, truncated at ``max_length`` tokens; ``bf16``: under
    ``torch.autocast("cpu"/"cuda", bfloat16)``, the softmax in fp32. ``on_batch(n)`` after each batch of n.
    """
    import numpy as np
    import torch

    out = np.empty((len(pairs), len(order)), dtype=np.float32)
    device = next(model.parameters()).device
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start:start + batch_size]
        enc = tokenizer([p for p, _ in batch], [h for _, h in batch], truncation=True, max_length=max_length,
                        padding=True, return_tensors="pt").to(device)
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(**enc).logits
        logp = torch.log_softmax(logits.float(), dim=-1)[:, list(order)]
        out[start:start + len(batch)] = logp.cpu().numpy()
        if on_batch is not None:
            on_batch(len(batch))
    return out


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _open_cache(cache_dir: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Create the cache folder with ``cache.json``, or check an existing one is of ``identity``; its content."""
    meta_path = cache_dir / CACHE_META
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        diff = [k for k in identity if meta.get(k) != identity[k]]
        if diff:
            raise CacheMismatch(f"teacher cache {cache_dir} is of another {diff[0]} ({meta.get(diff[0])!r}, this run "
                                f"{identity[diff[0]]!r}); give another --teacher-cache or remove that folder")
        return meta
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta = {**identity, "complete": {}}
    _write_atomic(meta_path, lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))
    return meta


def load_teacher(teacher_dir: str | Path):
    """``(tokenizer, model, order)``: the teacher in fp32 eval mode, on CUDA when there is one (`label_order`)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    config = json.loads((Path(teacher_dir) / "config.json").read_text(encoding="utf-8"))
    order = label_order(config)
    tokenizer = AutoTokenizer.from_pretrained(str(teacher_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(teacher_dir), dtype=torch.float32).eval()
    if torch.cuda.is_available():
        model = model.cuda()
    return tokenizer, model, order


def teacher_weights_sha256(teacher_dir: str | Path) -> str:
    """sha256 of the teacher's weight file (``model.safetensors``, else ``pytorch_model.bin``), read once a process
    while it stays the same (`zsnli.training.manifest_writer.folder_weights_sha256`: the cache's identity and the
    manifest's ``teacher`` entry name the same file). Raises `DataError` when the folder holds neither."""
    from .manifest_writer import folder_weights_sha256

    digest = folder_weights_sha256(teacher_dir)
    if digest is None:
        raise DataError(f"--teacher {teacher_dir}: no model.safetensors or pytorch_model.bin")
    return digest


def cache_file_name(digest: str) -> str:
    """The cache file of the pairs whose `pairs_digest` is ``digest``."""
    return f"teacher_logp-{digest[:16]}.npy"


def build_cache(distill: Distillation, pairs: Sequence[tuple[str, str]], max_length: int,
                on_chunk: Callable[[int], None] | None = None):
    """The teacher's log-probabilities of ``pairs`` (`teacher_log_probs`), computed or resumed in
    ``distill.cache_dir``; returns ``(array [len(pairs), 3] float32, record)``, ``record`` being
    ``{"file", "sha256", "pairs", "pairs_sha256"}`` of the cache file.

    Chunk k holds pairs ``[k * chunk_rows, (k + 1) * chunk_rows)`` as ``chunk-0000k-<digest>.npy``, the
    digest that of its own pairs: an existing chunk is kept, a missing one computed (``on_chunk(k)`` after
    each is written: progress, tests). So a killed run resumes at its first missing chunk, and a run whose
    pairs begin with another run's (augmented pairs come after the gold ones) reuses that run's whole
    chunks. When all are there, `cache_file_name` (all rows in order) is written and its sha256 listed in
    ``cache.json``'s ``complete``. Raises `CacheMismatch` when the folder is of another teacher or setting.
    """
    import numpy as np

    from ..runtime.progress import progress

    cache_dir = Path(distill.cache_dir).expanduser()
    identity = {"chunk_rows": distill.chunk_rows, "teacher_weights_sha256": teacher_weights_sha256(distill.teacher),
                "bf16": distill.bf16, "batch_size": distill.batch_size, "max_length": max_length,
                "labels": list(ID2LABEL.values()), "values": "natural log of the teacher's softmax, float32"}
    meta = _open_cache(cache_dir, identity)
    digest = pairs_digest(pairs)
    done = meta["complete"].get(digest)
    if done and (cache_dir / done["file"]).is_file():
        return np.load(cache_dir / done["file"]), done
    size = distill.chunk_rows
    chunks = [cache_dir / f"chunk-{k:05d}-{pairs_digest(pairs[k * size:(k + 1) * size])[:16]}.npy"
              for k in range(-(-len(pairs) // size))]
    todo = [k for k, path in enumerate(chunks) if not path.is_file()]
    if todo:
        tokenizer, model, order = load_teacher(distill.teacher)
        with progress(sum(len(pairs[k * size:(k + 1) * size]) for k in todo), "teacher cache") as advance:
            for k in todo:
                chunk = pairs[k * size:(k + 1) * size]
                logp = teacher_log_probs(model, tokenizer, chunk, distill.batch_size, max_length, distill.bf16, order,
                                         on_batch=advance)
                _write_atomic(chunks[k], lambda p: _save_npy(p, logp))
                if on_chunk is not None:
                    on_chunk(k)
    full = np.concatenate([np.load(path) for path in chunks]) if chunks \
        else np.empty((0, len(ID2LABEL)), dtype=np.float32)
    record = {"file": cache_file_name(digest), "pairs": len(pairs), "pairs_sha256": digest}
    _write_atomic(cache_dir / record["file"], lambda p: _save_npy(p, full))
    record["sha256"] = sha256_file(cache_dir / record["file"])
    meta["complete"][digest] = record
    _write_atomic(cache_dir / CACHE_META, lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))
    return full, record


def _save_npy(path: Path, array) -> None:
    import numpy as np

    with open(path, "wb") as handle:  # np.save on a path would append ".npy" to the temporary name
        np.save(handle, array, allow_pickle=False)


def teacher_pair_scores(logp):
    """The teacher's score of each pair: ``t = log p(entailment) - log p(contradiction)``, shape ``[...]``.

    ``logp``: float ``[..., 3]`` in `ID2LABEL` order (`build_cache`'s rows; a numpy array or a torch tensor), in
    nats. ``t`` is in nats too (a log-odds of entailment against contradiction) and equals ``z_e - z_c`` of the
    teacher's logits exactly: ``log p = z - logsumexp(z)`` differs from ``z`` by one constant per row, which the
    difference cancels; so ``t`` is the same whether computed from logits or log-probabilities, and adding any
    constant to a row leaves it unchanged. Neutral enters only through that constant. Used as the teacher's
    pair score of `zsnli.training.encoder.margin_mse_loss` (``train.py encoder --loss margin-mse``).
    """
    labels = list(ID2LABEL.values())
    return logp[..., labels.index("entailment")] - logp[..., labels.index("contradiction")]


def row_teacher_log_probs(rows: Sequence[dict[str, str]], pairs: Sequence[tuple[str, str]], cache) -> list[list[float]]:
    """Each row's teacher log-probabilities, looked up by its (premise, hypothesis) in ``pairs`` / ``cache``."""
    index = {pair: i for i, pair in enumerate(pairs)}
    return [cache[index[(r["premise"], r["hypothesis"])]].tolist() for r in rows]


# --------------------------------------------------------------------------- the loss


def distillation_loss(logits, labels, teacher_logp, alpha: float, temperature: float):
    """``alpha * CE + (1 - alpha) * T^2 * KL(teacher_T || student_T)`` (Hinton et al. 2015), a scalar.

    ``logits``: the student's float ``[B, 3]`` (`ID2LABEL` order); ``labels``: int ``[B]`` as `nli_loss`
    takes them, or `NO_GOLD_ID` for an augmented pair; ``teacher_logp``: float ``[B, 3]`` (the cache).
    CE is `nli_loss` over the rows with a gold label (0 when the batch has none); KL is the mean over all
    rows of sum_c p_T(c) (log p_T(c) - log q_T(c)), p_T = softmax(teacher_logp / T), q_T = softmax(logits
    / T), in nats, computed in fp32. With ``alpha`` = 1 the result is `nli_loss` exactly.
    """
    import torch

    gold = labels != NO_GOLD_ID
    if bool(gold.all()):
        ce = nli_loss(logits, labels)
    elif bool(gold.any()):
        ce = nli_loss(logits[gold], labels[gold])
    else:
        ce = logits.float().sum() * 0.0
    t = float(temperature)
    student = torch.log_softmax(logits.float() / t, dim=-1)
    teacher = torch.log_softmax(teacher_logp.float() / t, dim=-1)
    kl = torch.nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")
    return alpha * ce + (1.0 - alpha) * (t * t) * kl


def distill_trainer_class(alpha: float, temperature: float):
    """`zsnli.training.nli_trainer.nli_trainer_class`'s Trainer with `distillation_loss` on rows that carry
    `TEACHER_COLUMN` (the train set); evaluation batches (no such column) keep `nli_loss`."""
    base = nli_trainer_class()

    class DistillTrainer(base):
        """The NLI Trainer whose training loss is `distillation_loss` (its column kept through the Trainer's
        unused-column pruning)."""

        def _set_signature_columns_if_needed(self):
            super()._set_signature_columns_if_needed()
            if TEACHER_COLUMN not in self._signature_columns:
                self._signature_columns = [*self._signature_columns, TEACHER_COLUMN]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if TEACHER_COLUMN not in inputs:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            inputs = dict(inputs)
            labels, teacher = inputs.pop("labels"), inputs.pop(TEACHER_COLUMN)
            outputs = model(**inputs)
            loss = distillation_loss(outputs.logits, labels, teacher, alpha, temperature)
            return (loss, outputs) if return_outputs else loss

    return DistillTrainer


# --------------------------------------------------------------------------- provenance


def read_description(path: str | Path) -> dict[str, Any]:
    """The teacher's base id, data sources and exclusions from ``path`` (`TEACHER_DESCRIPTION_HINT`).

    Returns ``{"base_model": {...}, "sources": [...], "zsc_exclude": [...], "steps": int | None}``; raises
    `DataError` naming what is missing."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"--teacher-description {path}: not readable JSON ({json_problem(exc)})") from None
    sources = doc.get("sources") or doc.get("data", {}).get("sources")
    hp = doc.get("hyperparameters") or {}
    if not isinstance(doc.get("base_model"), dict) or not sources or "zsc_exclude" not in hp:
        raise DataError(f"--teacher-description {path}: no base_model, sources or hyperparameters.zsc_exclude; "
                        f"give {TEACHER_DESCRIPTION_HINT}")
    return {"base_model": doc["base_model"], "sources": sources, "zsc_exclude": list(hp["zsc_exclude"]),
            "steps": (doc.get("training") or {}).get("steps")}


def _same_exclusion(a: Path, b: Path) -> bool:
    """The same folder/file, or two files with the same bytes (the team dev set of another checkout)."""
    return a == b or (a.is_file() and b.is_file() and sha256_file(a) == sha256_file(b))


def uncovered_exclusions(teacher_exclude: Sequence[str], student_exclude: Sequence[str]) -> list[str]:
    """The student's excluded files/folders (choosing and reporting data) that the teacher's run did not
    exclude, compared as resolved paths (files also by content: the dev set of another checkout is the same
    exclusion): the teacher must have seen no text the student may not see."""
    have = [Path(p).expanduser().resolve() for p in teacher_exclude]
    return [p for p in student_exclude if not any(_same_exclusion(Path(p).expanduser().resolve(), h) for h in have)]


def _base_licence(base: str) -> str:
    """The licence a local base directory's model card names (`zsnli.training.manifest_writer.card_licence`),
    else a pointer to the card."""
    from .manifest_writer import card_licence

    return card_licence(base) or "see the base model's card"


def checkpoint_steps(teacher_dir: str | Path) -> int | None:
    """``global_step`` of a Trainer checkpoint's ``trainer_state.json``, or None."""
    state = Path(teacher_dir) / "trainer_state.json"
    return json.loads(state.read_text(encoding="utf-8")).get("global_step") if state.is_file() else None


def teacher_entry(distill: Distillation, cache: dict[str, Any],
                  settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``training_manifest.json`` ``teacher`` entry: base (id, weights sha256, licence), the teacher's
    training data and steps, its weights' sha256, the cache file (``cache``: `build_cache`'s record) and the
    loss settings as ``distillation``: ``settings`` when given (the encoder's margin-MSE run,
    `zsnli.training.encoder.train_encoder`, whose ``encoder_manifest.json`` holds this entry too), else
    `Distillation.hyperparameters`."""
    desc = read_description(distill.description)
    base_id = desc["base_model"].get("id")
    base_sha256 = desc["base_model"].get("weights_sha256")
    if not base_sha256 and base_id and Path(base_id).expanduser().is_dir():
        from .manifest_writer import base_weights_sha256

        base_sha256 = base_weights_sha256(str(Path(base_id).expanduser()), None)
    return {
        "dir": str(Path(distill.teacher).expanduser().resolve()),
        "base_model": {"id": base_id, "weights_sha256": base_sha256,
                       "licence": _base_licence(base_id) if base_id else "unknown"},
        "description": str(distill.description),
        "data_sources": desc["sources"],
        "excluded_texts_from": desc["zsc_exclude"],
        "steps": checkpoint_steps(distill.teacher) or desc["steps"],
        "weights_sha256": teacher_weights_sha256(distill.teacher),
        "cache": {"dir": str(Path(distill.cache_dir).expanduser().resolve()), **cache},
        "distillation": distill.hyperparameters() if settings is None else settings,
    }


def check_teacher(entry: dict[str, Any]) -> list[FileCheck]:
    """``train.py verify`` of a manifest's ``teacher`` entry: the teacher's weights and its cache file re-hashed
    where the entry says they are; status ``ok``, ``mismatch`` or ``absent`` (not on this machine: they are
    never shipped)."""
    from .manifest_writer import weights_file

    weights = weights_file(entry["dir"])  # hashed afresh below: verify re-reads, never trusts a process cache
    cache = Path(entry["cache"]["dir"]) / entry["cache"]["file"]
    out = []
    for name, path, want in (("teacher weights", weights, entry["weights_sha256"]),
                             ("teacher cache", cache, entry["cache"]["sha256"])):
        have = sha256_file(path) if path is not None and path.is_file() else None
        status = "absent" if have is None else "ok" if have == want else "mismatch"
        out.append(FileCheck(f"{name} ({path or entry['dir']})", status, want, have))
    return out
