"""Random-weight NLI models built offline, for throughput runs when no trained model of the
wanted architecture is at hand.

Throughput does not depend on the weights, only on the architecture, the
dtype and the token counts, so a randomly initialised deberta-v3-base is a
faithful stand-in for timing (never for accuracy). ``python -m
zsnli.bench.random_models --arch deberta-v3-base --out DIR [--tokenizer-from DIR]``.

``--out`` must be a new or empty folder (`check_out`): a file is refused, and an existing folder that holds files,
or the served model's folder (the checkout's ``model/``, ``./model``, ``$ZSNLI_MODEL_DIR``) and anything in it, is
refused unless ``--force``. May import ``zsnli.harness`` (the parser, the examples reader), `zsnli.bench.bench_args`
(the description) and ``zsnli.runtime.embedding`` (where the checkout's model lies).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..harness.cli import UsageParser, one_line, one_line_errors, usage_error
from ..training.usage import UsageError, check_file_arg
from .bench_args import command_description

PROG = "python -m zsnli.bench.random_models"

#: id2label of the models built here (MNLI order).
NLI_ID2LABEL = {0: "entailment", 1: "neutral", 2: "contradiction"}

#: microsoft/deberta-v3-base's config.json sizes (the model card's config), 3-way NLI head added.
DEBERTA_V3_BASE = dict(
    vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
    hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=512,
    type_vocab_size=0, initializer_range=0.02, layer_norm_eps=1e-7, relative_attention=True,
    max_relative_positions=-1, position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
    pos_att_type=["p2c", "c2p"], position_biased_input=False, pooler_hidden_size=768, pooler_dropout=0,
    pooler_hidden_act="gelu", pad_token_id=0,
)

#: A deberta-v2 architecture small enough for CPU tests (same code paths as v3-base).
DEBERTA_TINY = dict(
    DEBERTA_V3_BASE, vocab_size=2000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, position_buckets=32, pooler_hidden_size=32,
)

ARCHS = {"deberta-v3-base": DEBERTA_V3_BASE, "deberta-tiny": DEBERTA_TINY}

#: Where a real deberta-v3 tokenizer may already sit in a local Hugging Face cache.
DEBERTA_V3_TOKENIZER_IDS = ("microsoft/deberta-v3-base", "microsoft/deberta-v3-large", "microsoft/deberta-v3-small",
                            "microsoft/deberta-v3-xsmall")

_FALLBACK_CORPUS = (
    "the a of to in and is was for on that with as by at from it this be are an or not have has but which "
    "news sport sports business science technology world politics market stock company bank money card "
    "transfer refund payment account review movie film music story good bad great terrible happy sad "
    "anger fear joy love sadness surprise sentiment investor perspective positive negative neutral "
    "example text message customer tweet expresses emotion about"
).split()


def train_unigram_tokenizer(texts: Iterable[str], vocab_size: int = 8000, window: int = 512):
    """A Unigram/Metaspace fast tokenizer (deberta-v3's kind) trained offline on ``texts``.

    Returns a ``PreTrainedTokenizerFast`` with ``[PAD]=0, [CLS], [SEP], [UNK], [MASK]``,
    pair template ``[CLS] A [SEP] B [SEP]``, no token type ids, ``model_max_length=window``.
    Token counts are close to, not equal to, the real 128k SentencePiece vocabulary's.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"],
                                      unk_token="[UNK]", show_progress=False)
    tok.train_from_iterator(list(texts) or [" ".join(_FALLBACK_CORPUS)], trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=window,
                                   model_input_names=["input_ids", "attention_mask"])


class TokenizerError(ValueError):
    """A named ``--tokenizer-from`` folder whose tokenizer cannot be used (the message says why, in one line)."""


def tokenizer_from_dir(path: str | Path, window: int = 512) -> Any:
    """The fast tokenizer saved in the model folder ``path`` (``local_files_only``), set to emit no token type ids
    and to the new model's ``window``. Raises `TokenizerError` when ``path`` is no folder, holds no tokenizer
    files, cannot be loaded, or is not a fast tokenizer."""
    from transformers import AutoTokenizer

    folder = Path(path)
    if not folder.is_dir():
        raise TokenizerError(f"--tokenizer-from {path}: no such directory")
    if not any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "spm.model")):
        raise TokenizerError(f"--tokenizer-from {path}: no tokenizer files (tokenizer.json, tokenizer_config.json)")
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; one line names it
        raise TokenizerError(f"--tokenizer-from {path}: its tokenizer does not load ({one_line(exc)[:200]})") \
            from None
    if not getattr(tok, "is_fast", False):
        raise TokenizerError(f"--tokenizer-from {path}: {type(tok).__name__} is not a fast tokenizer")
    tok.model_input_names = ["input_ids", "attention_mask"]
    tok.model_max_length = window  # the new model's window, not the donor model's
    return tok


def _donor_note(path: str | Path, tok: Any) -> str:
    """What the report says of a tokenizer taken from ``path``: its class and size, and that it is not deberta-v3's
    vocabulary."""
    return (f"the tokenizer of {path} ({type(tok).__name__}, {len(tok)} tokens), NOT deberta-v3's 128k SentencePiece "
            "vocabulary: token counts differ somewhat")


def find_tokenizer(tokenizer_from: str | Path | None, corpus: Sequence[str], vocab_limit: int,
                   window: int = 512, required: bool = False,
                   corpus_name: str = "the examples' texts and labels") -> tuple[Any, str]:
    """The tokenizer for a random-weight model, and a sentence saying which one it is.

    With ``required`` (a ``--tokenizer-from`` the user named): the tokenizer in ``tokenizer_from``, whatever its
    size (`build_random_nli` widens the embedding table to it), or `TokenizerError`. Otherwise tried in order: a
    deberta-v3 tokenizer already in the local Hugging Face cache (``local_files_only``, no network); the
    tokenizer in ``tokenizer_from`` (e.g. ./model) when it loads and its vocabulary fits ``vocab_limit``; a
    Unigram tokenizer trained now on ``corpus`` (on a built-in word list when ``corpus`` is empty), named
    ``corpus_name`` in the sentence. The returned tokenizer emits no token type ids (DeBERTa-v3 has none).
    """
    from transformers import AutoTokenizer

    if required and tokenizer_from is not None:
        tok = tokenizer_from_dir(tokenizer_from, window)
        return tok, _donor_note(tokenizer_from, tok)
    for hub_id in DEBERTA_V3_TOKENIZER_IDS:
        try:
            tok = AutoTokenizer.from_pretrained(hub_id, local_files_only=True)
        except Exception:  # noqa: BLE001 - not cached / no sentencepiece: try the next
            continue
        if getattr(tok, "is_fast", False) and len(tok) <= vocab_limit:
            tok.model_max_length = window
            return tok, f"the real {hub_id} tokenizer (local Hugging Face cache)"
    if tokenizer_from:
        try:
            tok = tokenizer_from_dir(tokenizer_from, window)
            if len(tok) <= vocab_limit:
                return tok, _donor_note(tokenizer_from, tok)
        except TokenizerError:
            pass  # unusable: fall through to training one
    tok = train_unigram_tokenizer(corpus, vocab_size=min(8000, vocab_limit), window=window)
    source = corpus_name if corpus else "a built-in list of about 100 words (no --examples given)"
    return tok, (f"a Unigram tokenizer trained offline on {source} ({len(tok)} tokens), NOT deberta-v3's "
                 "128k SentencePiece vocabulary: token counts differ somewhat")


def build_random_nli(out_dir: str | Path, arch: str = "deberta-v3-base", tokenizer_from: str | Path | None = None,
                     corpus: Sequence[str] = (), seed: int = 0, tokenizer_required: bool = False,
                     corpus_name: str = "the examples' texts and labels") -> dict[str, Any]:
    """Write a randomly initialised ``arch`` NLI model plus a tokenizer to ``out_dir`` (offline).

    arch: ``"deberta-v3-base"`` (184M parameters, 12 x 768) or ``"deberta-tiny"``.
    The config keeps ``vocab_size`` of the architecture (embedding table of
    the real size), widened to the tokenizer's when that is larger (a named
    ``tokenizer_from`` with ``tokenizer_required``: `find_tokenizer`, which raises
    `TokenizerError` when it cannot be used; ``corpus_name`` says what ``corpus`` is). Saved in float32
    safetensors. Writes into ``out_dir`` whatever it holds (the command checks it first: `check_out`).
    Returns ``{"model_dir", "arch", "tokenizer", "parameters", "random_weights": True}``
    and writes the same as ``bench_model.json`` in ``out_dir``.
    """
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {sorted(ARCHS)}")
    spec = dict(ARCHS[arch])
    out = Path(out_dir)
    tok, tok_note = find_tokenizer(tokenizer_from, corpus, spec["vocab_size"], spec["max_position_embeddings"],
                                   required=tokenizer_required, corpus_name=corpus_name)
    spec["vocab_size"] = max(spec["vocab_size"], len(tok))
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    spec["pad_token_id"] = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
    cfg = DebertaV2Config(**spec, id2label=dict(NLI_ID2LABEL), label2id={v: k for k, v in NLI_ID2LABEL.items()})
    torch.manual_seed(seed)
    model = DebertaV2ForSequenceClassification(cfg).eval()
    model.save_pretrained(out, safe_serialization=True)
    info = {"model_dir": str(out), "arch": arch, "tokenizer": tok_note,
            "parameters": sum(p.numel() for p in model.parameters()), "random_weights": True}
    (out / "bench_model.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info


def _corpus(examples: str | None) -> list[str]:
    """The texts and labels of the examples file ``examples`` (none without one). Raises ``ValueError`` (one line)
    for a missing file or one not in the examples format (`zsnli.harness.examples.load_examples`)."""
    if not examples:
        return []
    from ..harness.examples import ExamplesError, load_examples

    try:
        check_file_arg(examples, "--examples", "give a JSONL file in the examples format (DESIGN.md section 9)")
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    try:
        return [t for d in load_examples(examples).examples for t in (d.text, *d.labels)]
    except ExamplesError as exc:
        raise ValueError(f"--examples {examples}: not an examples file ({exc}); give a JSONL of "
                         '{"id", "dataset", "text", "labels", "label"} rows, all five required (the examples '
                         "format, DESIGN.md section 9)") from None


def served_model_dirs() -> list[Path]:
    """The folders a server here serves by default, resolved: the checkout's ``model/``, ``./model`` (the
    ``ZSNLI_MODEL_DIR`` default, `zsnli.config.Settings`) and ``$ZSNLI_MODEL_DIR`` when set."""
    from ..runtime.embedding import REPO_MODEL_DIR

    found = [REPO_MODEL_DIR, Path("model"), *([Path(os.environ["ZSNLI_MODEL_DIR"])] if os.environ.get("ZSNLI_MODEL_DIR")
                                              else [])]
    return list(dict.fromkeys(p.resolve() for p in found))


def check_out(out: str | Path, force: bool = False) -> None:
    """Refuse an ``--out`` the random model must not be written into (``ValueError``, one line): a file (always);
    without ``force``, the served model's folder or any folder in it (`served_model_dirs`: random weights would
    replace the model a server reads), and an existing folder that holds anything. A new or empty folder passes."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: give a folder for the model (created when missing)")
    if force:
        return
    served = next((d for d in served_model_dirs() if path.resolve().is_relative_to(d)), None)
    if served is not None:
        raise ValueError(f"--out {out} is in the served model's folder {served}: random weights would replace the "
                         "model a server reads; give another folder, or --force")
    if path.is_dir() and any(path.iterdir()):
        held = sorted(p.name for p in path.iterdir())
        raise ValueError(f"--out {out} already holds {len(held)} file(s) or folder(s) ({', '.join(held[:3])}"
                         f"{', ...' if len(held) > 3 else ''}): give a new or empty folder, or --force to write over "
                         "them")


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option; `main` checks the paths."""
    ap = UsageParser(prog=PROG, description=command_description(__doc__))
    ap.add_argument("--arch", choices=sorted(ARCHS), default="deberta-v3-base",
                    help="the architecture: deberta-v3-base (microsoft/deberta-v3-base's published config, 184M "
                         "parameters, 12 layers x 768, a 3-way NLI head) or deberta-tiny (2 layers x 32, for CPU "
                         "tests) (default: %(default)s)")
    ap.add_argument("--out", required=True, metavar="DIR",
                    help="the folder the model is written into (config.json, model.safetensors, the tokenizer, "
                         "bench_model.json); created when missing. A file is refused; an existing folder that "
                         "holds anything, and the served model's folder (model/), are refused unless --force")
    ap.add_argument("--force", action="store_true",
                    help="write into a non-empty --out anyway: files of the same names are replaced, others kept")
    ap.add_argument("--tokenizer-from", default=None, metavar="MODEL_DIR",
                    help="use this model folder's tokenizer (e.g. model); refused in one line when it cannot be "
                         "used (default: a cached deberta-v3 tokenizer, else one trained on --examples)")
    ap.add_argument("--examples", default=None, metavar="FILE",
                    help="an examples JSONL ({\"id\", \"dataset\", \"text\", \"labels\", \"label\"} rows) whose "
                         "texts and labels train the fallback tokenizer")
    return ap


@one_line_errors(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """CLI: build a random model (see module docstring); prints the info JSON. An ``--out`` refused by `check_out`,
    a missing or unusable ``--examples`` or ``--tokenizer-from`` is one line, exit 2."""
    args = build_parser().parse_args(argv)
    try:
        check_out(args.out, args.force)
        corpus = _corpus(args.examples)
        info = build_random_nli(args.out, args.arch, args.tokenizer_from, corpus, tokenizer_required=True,
                                corpus_name=f"the texts and labels of {args.examples}")
    except ValueError as exc:
        return usage_error(PROG, str(exc))
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
