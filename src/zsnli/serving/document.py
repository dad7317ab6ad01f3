"""One document on its way through the service: its hypotheses (`Prepared`), its batcher work (`Tokenized`)
and the tokeniser-thread steps that build the work (`tokenize`, `check_label_tokens`).

`zsnli.serving.service.ZeroShotClassifier` prepares a document (``preprocess``), runs `tokenize` on its
tokeniser thread and hands `Tokenized.work` to the batcher. May import `zsnli.serving.batching` (the kind
names), `zsnli.errors`, `zsnli.request_scoring` (the cascade, and the `RequestScoring` a document is
scored with), `zsnli.runtime.model` and `zsnli.runtime.embedding` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .batching import DEFAULT_KIND
from ..errors import ApiError, ErrorType
from ..request_scoring import Cascade, RequestScoring
from ..runtime.embedding import SentenceEncoder
from ..runtime.model import Encoded, NliRuntime

# A hypothesis longer than this many characters per window token is rejected
# (label_too_long) before it is tokenised: no tokenizer packs that much into a token.
HYPOTHESIS_CHARS_PER_TOKEN = 20

#: Batcher kinds of the sentence encoder's work: request texts, and hypotheses. Two kinds, so
#: a text and the (short) labels are never padded to each other's length in one batch.
TEXT_KIND = "embedding_text"
LABEL_KIND = "embedding_label"


@dataclass
class Prepared:
    """One document after ``preprocess``: the hypotheses, deduplicated (``unique[where[i]]`` is label i's),
    and the `zsnli.request_scoring.RequestScoring` its single-label probabilities come from (the served one,
    or the one the request's ``scoring`` named: ``pipeline``, ``embedding``)."""

    text: str
    labels: list[str]
    hyps: list[str]
    unique: list[str]
    where: list[int]
    bare: list[str] | None  # the distinct labels without the template (None: no template)
    content_free: str | None
    multi_label: bool
    group: str | None = None  # `zsnli.request_scoring.request_group` of the hypotheses (None: multi-label, K = 1)
    needs_premise_tokens: bool = False  # the calibrator reads the text's length in tokens
    cascade: Cascade | None = None  # set when only the top labels by cosine go to the cross-encoder
    kept: list[int] | None = None  # with a cascade: the indices into ``unique`` it kept (set after the cosines)
    scoring: RequestScoring | None = None  # its single-label scoring: the served, pipeline or embedding one

    @property
    def n_pairs(self) -> int:
        """Units this document reserves against the queue capacity before anything is tokenised: its NLI
        pairs, or, when it has none (a cascade that keeps no label: the ``embedding`` scoring), its
        embeddings (the text and each distinct hypothesis), so the capacity bounds that work too."""
        scored = min(self.cascade.keep, len(self.unique)) if self.cascade is not None else len(self.unique)
        pairs = scored * (2 if self.content_free is not None else 1)
        return pairs if pairs else 1 + len(self.unique)

    def work(self, embeds: bool) -> int:
        """The document's whole work, the unit ``ZSNLI_MAX_REQUEST_PAIRS`` counts: every (document, label)
        pair before the cascade prunes any (x 2 with a content-free premise), plus one label embedding per
        distinct hypothesis when ``embeds`` (the request's scoring has the cosine term, which a cascade
        needs). A cascade saves cross-encoder pairs, not the cosine ranking over every label, so it does not
        shrink this count (``n_pairs`` is what is reserved in the queue)."""
        pairs = len(self.unique) * (2 if self.content_free is not None else 1)
        return pairs + (len(self.unique) if embeds else 0)

    @property
    def scored(self) -> list[str]:
        """The distinct hypotheses the cross-encoder scores: all of them, or the cascade's kept ones."""
        return list(self.unique) if self.kept is None else [self.unique[i] for i in self.kept]


@dataclass
class Tokenized:
    """One document's batcher work: its NLI ``pairs`` and, with a cosine term, the encoder's
    ``text`` and ``labels`` (the distinct hypotheses, in ``Prepared.unique`` order)."""

    pairs: list[Encoded]
    text: list[Encoded] = field(default_factory=list)
    labels: list[Encoded] = field(default_factory=list)
    premise_tokens: int = 0  # the text's tokens (`NliRuntime.premise_tokens`), when the calibrator needs them

    def work(self) -> list[tuple[str, list[Encoded]]]:
        """``(kind, items)`` for each batcher job, NLI first (when there are pairs); the embedding jobs when present."""
        jobs = [(DEFAULT_KIND, self.pairs)] if self.pairs else []
        if self.text:
            jobs += [(TEXT_KIND, self.text), (LABEL_KIND, self.labels)]
        return jobs


def fill_template(template: str | None, label: str) -> str:
    """The hypothesis for ``label``: the template's single ``{}`` replaced literally (never ``str.format``)."""
    return label if template is None else template.replace("{}", label, 1)


def check_label_tokens(model: NliRuntime, prep: Prepared) -> None:
    """Tokeniser thread: raise ``ApiError`` 422 naming ``labels[i]`` for the first label with no tokens, or whose
    tokens are all the unknown token (`zsnli.runtime.model.NliRuntime.unknown_only`: emoji, historic scripts,
    anything the vocabulary lacks; of the bare label when a template is used), or whose hypothesis does not
    fit the window."""
    lengths = model.hypothesis_lengths(prep.unique)
    bare_lengths = model.hypothesis_lengths(prep.bare) if prep.bare is not None else lengths
    bare = prep.bare if prep.bare is not None else prep.unique
    for j, (n, unknown) in enumerate(zip(bare_lengths, model.unknown_only(bare))):
        if n == 0 or unknown:
            i = prep.labels.index(prep.bare[j]) if prep.bare is not None else prep.hyps.index(prep.unique[j])
            why = ("label is empty after normalisation (it has no tokens: only invisible, control or whitespace "
                   "characters)") if n == 0 else (
                "the model reads this label only as unknown tokens ([UNK]), so it cannot tell it from any other "
                "such label: write it in characters the model's tokenizer knows")
            raise ApiError(ErrorType.VALIDATION, f"labels[{i}]: {why}", f"labels[{i}]")
    limit = model.max_hypothesis_tokens()
    for j, n in enumerate(lengths):
        if n > limit:
            i = prep.hyps.index(prep.unique[j])
            raise ApiError(ErrorType.LABEL_TOO_LONG, f"labels[{i}]: does not fit the model window "
                           f"({model.max_length} tokens with the text; ZSNLI_MAX_LENGTH caps it): shorten it; "
                           "labels are never cut", f"labels[{i}]")


def embedding_tokens(model: NliRuntime, encoder: SentenceEncoder, prep: Prepared) -> Tokenized:
    """Tokeniser thread, first step of a cascade: `check_label_tokens` (every label, pruned or not, is checked
    as without a cascade), then the text and every distinct hypothesis for the sentence encoder (no pairs)."""
    check_label_tokens(model, prep)
    return Tokenized([], encoder.tokenize([prep.text]), encoder.tokenize(prep.unique))


def tokenize(model: NliRuntime, encoder: SentenceEncoder | None, prep: Prepared) -> Tokenized:
    """Tokeniser thread: `check_label_tokens`, then encode the pairs of `Prepared.scored` (text, and the
    content-free premise) and, with an ``encoder``, the text and the distinct hypotheses for it."""
    check_label_tokens(model, prep)
    hyps = prep.scored
    premises = [prep.text] * len(hyps)
    if prep.content_free is not None:
        premises += [prep.content_free] * len(hyps)
        hyps = hyps + hyps
    out = Tokenized(model.encode(premises, hyps) if hyps else [])  # a cascade may keep no label
    if prep.needs_premise_tokens:
        out.premise_tokens = model.premise_tokens([prep.text])[0]
    if encoder is not None:
        out.text, out.labels = encoder.tokenize([prep.text]), encoder.tokenize(prep.unique)
    return out
