"""The ``zsnli`` command line: ``zsnli classify`` (against a server, or in-process) and ``zsnli serve``.

    zsnli classify "I was charged twice" --labels "refund,card lost,exchange rate" [--template "About {}."]
    zsnli classify --input docs.jsonl --output answers.jsonl --labels sport,business   # a progress bar
    zsnli classify "text" --labels a,b --model-dir ./model      # in-process, no server
    zsnli serve                                                  # what ./serve.sh runs

``classify`` sends ``--labels`` as the pipeline's ``candidate_labels``: with
no ``--template`` they get the pipeline's ``"This example is {}."``
(``--template '{}'`` keeps them literal). It talks to ``--url`` (default
``$ZSNLI_URL``, else http://127.0.0.1:8000) through `zsnli.client.Client`
(503 retried after ``Retry-After``), or with ``--model-dir`` runs the model
in this process (`zsnli.serving.offline.OfflineClassifier`, the server's own checks
and scoring). With ``--input``, every line is a ``/classify`` request object
whose missing ``labels``/``hypothesis_template``/``multi_label``/``scoring`` come from the
flags (``--scoring pipeline``: the transformers pipeline's own scoring; ``--scoring embedding``: the fast path); every output line is that line's answer, in order
(``{"id", "labels", "probabilities"}`` or its error with ``status`` and the input ``line``;
blank lines are skipped and get none); exit 1 when some lines got errors. The input is streamed (``--batch-size`` lines read,
sent, written and flushed, then the next: memory is about one batch; ``-``
reads stdin). A line that is not UTF-8 or not JSON gets its error line here
(``status`` 400); a JSON value that is not an object is sent and
gets the server's 422; every error line carries its input ``line`` (1-based, blank lines counted). A UTF-8 byte-order mark is skipped; a UTF-16/32
file is refused in one line. ``serve`` is ``serve.sh``: offline unless
``ZSNLI_ALLOW_DOWNLOAD=1``, configured by ``ZSNLI_*``, exit codes 0/1/3.

Every mistake (a flag, an unreadable or non-UTF-8 input, a server that
cannot be reached, an error answer, an answer that is not the API's, e.g.
HTML from a wrong ``--url``, a ``--url`` without its scheme: `zsnli.harness.cli.url_problem`) is one line
on stderr and exit 2.

May import: `zsnli.client`, `zsnli.harness.cli`, `zsnli.serving.inference_api` (``split_labels``),
`zsnli.serving.api_types` (``SCORINGS``),
`zsnli.runtime.progress`, and, for
``--model-dir`` or ``serve`` only, `zsnli.serving.app`, `zsnli.config`, `zsnli.serving.offline`,
`zsnli.serve`, `zsnli.serving.startup`.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence

from . import __version__
from .harness.cli import (INTERRUPTED_EXIT, UTF8_BOM, UsageParser, encoding_problem, json_syntax, one_line,
                          one_line_errors, positive_float, positive_int, url_problem)
from .serving.api_types import SCORINGS
from .serving.inference_api import split_labels

PROG = "zsnli"
DEFAULT_URL = "http://127.0.0.1:8000"
#: ``ZSNLI_ALLOW_DOWNLOAD`` values that allow a hub download (as `zsnli.config` parses booleans).
_TRUE = ("1", "true", "yes", "on")


class CommandError(Exception):
    """A failure reported as one line ``zsnli: error: ...`` and exit 2."""


def build_parser() -> UsageParser:
    """The ``zsnli`` argument parser (usage errors are one line, exit 2)."""
    parser = UsageParser(prog=PROG, description="Zero-shot text classification from an NLI cross-encoder.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{classify,serve}", parser_class=UsageParser)
    c = sub.add_parser("classify", help="classify a text, or a JSONL file of request objects",
                       description="Probabilities of each label for a text (or each line of --input).")
    c.add_argument("text", nargs="?", help="the text to classify (or give --input)")
    c.add_argument("--labels", help="candidate labels separated by commas, e.g. sport,business,science")
    c.add_argument("--template", help="hypothesis template with one {} (default: the pipeline's "
                   "'This example is {}.'; '{}' keeps the labels literal)")
    c.add_argument("--multi-label", action="store_true", help="score each label on its own")
    c.add_argument("--scoring", choices=SCORINGS, default=None,
                   help="single-label scoring: served (the server's, calibrated for the shipped model), "
                   "pipeline (the transformers zero-shot pipeline's own) or embedding (the fast path: the sentence "
                   "encoder's cosine alone, no cross-encoder pair); default: the server's ZSNLI_SCORING")
    where = c.add_mutually_exclusive_group()
    where.add_argument("--url", help=f"the server (default $ZSNLI_URL, else {DEFAULT_URL})")
    where.add_argument("--model-dir", help="classify in this process with this model directory (no server)")
    c.add_argument("--input", help="JSONL file (UTF-8; '-': stdin), one /classify request object a line, "
                   "read as it is sent")
    c.add_argument("--output", help="--input's answers as JSONL, one a line in input order (default: stdout)")
    c.add_argument("--batch-size", type=positive_int, default=32, help="documents per request (default 32)")
    c.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per HTTP call (default 60)")
    c.add_argument("--json", action="store_true",
                   help="print a single text's answer as one JSON object (not with --input: its answers are "
                        "JSON lines)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("serve", help="run the server (as ./serve.sh: configured by HOST, PORT and ZSNLI_*)",
                   add_help=False)
    return parser


def _defaults(args) -> dict[str, Any]:
    """The request fields the flags give (a line of --input keeps its own)."""
    out: dict[str, Any] = {}
    if args.labels is not None:
        labels = split_labels(args.labels)
        if not labels:
            raise CommandError(f"--labels has no label: {args.labels!r} (separate labels with commas)")
        parts = args.labels.split(",")
        empty = [k for k, part in enumerate(parts, 1) if not part.strip()]
        if empty:  # "a,,b": the pipeline's reading would drop it; a typo here should not shrink the label set
            raise CommandError(f"--labels {args.labels!r}: label {empty[0]} of {len(parts)} is empty (two commas in "
                               "a row, or one at an end); give every label between commas")
        out["candidate_labels"] = labels
    if args.template is not None:
        out["hypothesis_template"] = args.template
    if args.multi_label:
        out["multi_label"] = True
    if args.scoring is not None:
        out["scoring"] = args.scoring
    return out


#: Byte-order marks of encodings that are not UTF-8 (UTF-32 first: its little-endian mark starts with UTF-16's).


def line_error(n: int, message: str, error_type: str, status: int) -> dict[str, Any]:
    """The output line of an input line that is not a request: the server's error shape
    (``error``, ``field``, ``error_type``, ``status``) plus ``line`` (1-based)."""
    return {"error": f"line {n}: {message}", "field": None, "error_type": error_type, "status": status, "line": n}


def check_encoding(path: str, head: bytes) -> None:
    """Raise `CommandError` when ``head`` (the file's first bytes) shows it is not UTF-8
    (`zsnli.harness.cli.encoding_problem`, the examples reader's words too: a UTF-16/32 byte-order mark, or NUL bytes
    in the first line). A UTF-8 BOM is fine."""
    problem = encoding_problem(head)
    if problem:
        raise CommandError(f"--input {path} {problem}")


def parse_line(n: int, raw: bytes, defaults: dict[str, Any]) -> Any:
    """One input line (bytes, without its newline) as a request to send, or the `line_error` entry
    that answers it when it is not UTF-8 or not JSON. A JSON value that is not an object is sent as it
    is (the server answers it 422, as ``POST /classify`` does); an object gets the flag ``defaults``
    it lacks (``labels`` counts as ``candidate_labels``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _BadLine(line_error(n, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1})",
                                   "invalid_json", 400))  # the server's error type for text that is not UTF-8
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return _BadLine(line_error(n, f"not valid JSON ({json_syntax(exc, column=False)})", "invalid_json", 400))
    if isinstance(doc, dict):
        given = set(doc) | ({"candidate_labels"} if "labels" in doc else set())
        doc = {**{k: v for k, v in defaults.items() if k not in given}, **doc}
    return doc


class _BadLine:
    """An input line answered here (not sent): ``entry`` is its output line."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry


def read_requests(path: str, defaults: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """Stream ``path``'s non-blank lines as ``(line number, parse_line result)`` (1-based, counting blank
    lines; the result a request object or a `_BadLine`); blank lines (only whitespace) are skipped, as
    JSONL readers skip them, so they get no output line. Reads one line at a time (memory: the longest line). Lines end at ``\\n`` only (``\\r\\n`` too; not
    ``str.splitlines``: U+2028 may sit inside a JSON string); a UTF-8 byte-order mark is skipped, as the
    server skips it in a body. Raises `CommandError` (one line) when the file cannot be opened or is
    not UTF-8 (`check_encoding`)."""
    try:
        handle = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as exc:
        raise CommandError(f"cannot read --input {path}: {exc.strerror or exc}") from None
    with handle:
        head = handle.peek(4096)[:4096] if hasattr(handle, "peek") else b""
        check_encoding(path, head)
        if head.startswith(UTF8_BOM):
            handle.read(len(UTF8_BOM))
        try:
            for n, raw in enumerate(handle, 1):
                raw = raw.rstrip(b"\n").rstrip(b"\r")
                if raw.strip():
                    yield n, parse_line(n, raw, defaults)
        except OSError as exc:
            raise CommandError(f"cannot read --input {path}: {exc.strerror or exc}") from None


def count_lines(path: str) -> int | None:
    """Non-blank lines of ``path`` for the progress total (one pass, a line in memory at a time); None
    for what is not a regular file (stdin, a pipe: reading it would consume it) or cannot be read."""
    if path == "-" or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return None


# --------------------------------------------------------------------------- backends

Backend = Callable[[list], list]
"""``f(request objects) -> answers``: one ``{"id", "probabilities"}`` or error entry (with ``status``) each."""


def http_backend(url: str, timeout: float, batch_size: int):
    """A `Backend` over ``POST /classify`` arrays (`zsnli.client.Client`), and the client to close. Its
    entries have the server's (and `InProcess`'s) shape: ``{"id", "labels", "probabilities"}``."""
    from .client import APIError, Client

    client = Client(url, timeout=timeout, batch_size=batch_size)

    def run(docs: list) -> list:
        return [dict(r.body) if isinstance(r, APIError)
                else {"id": r.id, "labels": r.labels, "probabilities": r.probabilities}
                for r in client.classify_many(docs)]

    return run, client


class InProcess:
    """A `Backend` running the model in this process (`zsnli.serving.offline.OfflineClassifier`): every object is
    checked as ``POST /classify`` checks it (`zsnli.serving.app.parse_classify_request`), scored as the server
    scores it. Raises `CommandError` when the model cannot be served (a preflight refusal)."""

    def __init__(self, model_dir: str) -> None:
        from .config import Settings, SettingsError
        from .serving.offline import OfflineClassifier
        from .serving.startup import STARTUP_ERRORS, StartupRefused, missing_model_dir, one_line

        overrides: dict[str, Any] = {"model_dir": model_dir, "model_id": None, "model_revision": None}
        if "ZSNLI_LOG_LEVEL" not in os.environ:
            overrides["log_level"] = "warning"
        try:
            settings = Settings.from_env(**overrides)
            missing = missing_model_dir(settings, "--model-dir", given=True)
            if missing:
                raise CommandError(missing)
            self.clf = OfflineClassifier(settings).__enter__()
        except (SettingsError, StartupRefused, *STARTUP_ERRORS) as exc:
            raise CommandError(f"cannot serve --model-dir {model_dir}: {one_line(exc)}") from None
        except RuntimeError as exc:  # the background load failed
            raise CommandError(one_line(exc)) from None

    def __call__(self, docs: list) -> list:
        from .serving.app import array_entry, parse_classify_request
        from .errors import ApiError

        answers: list[Any] = [None] * len(docs)
        valid = []
        for i, doc in enumerate(docs):
            try:
                req, alias = parse_classify_request(doc)
                valid.append((i, req, alias))
            except ApiError as exc:
                answers[i] = exc
        results = self.clf.classify_many([{"text": r.text, "labels": r.labels, "hypothesis_template":
                                           r.hypothesis_template, "multi_label": r.multi_label, "scoring": r.scoring}
                                          for _, r, _ in valid])
        labels = {i: r.labels for i, r, _ in valid}
        for (i, _, alias), result in zip(valid, results):
            answers[i] = result.renamed("labels", "candidate_labels") if isinstance(result, ApiError) and alias \
                else result
        return [array_entry(doc, answer, labels.get(i)) for i, (doc, answer) in enumerate(zip(docs, answers))]

    def close(self) -> None:
        self.clf.close()


# --------------------------------------------------------------------------- commands


def _print_one(doc: dict, answer: dict, as_json: bool) -> int:
    if "probabilities" not in answer:
        raise CommandError(f"{answer.get('error')} ({answer.get('error_type')}, HTTP {answer.get('status')})")
    labels = doc.get("candidate_labels") or doc.get("labels")
    if as_json:
        print(json.dumps({"labels": labels, "probabilities": answer["probabilities"]}))
        return 0
    width = max(len(lb) for lb in labels)
    for label, p in sorted(zip(labels, answer["probabilities"]), key=lambda lp: -lp[1]):
        print(f"{label:<{width}}  {p:.4f}")
    return 0


def _chunks(requests: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for request in requests:
        chunk.append(request)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def answer_chunk(backend: Backend, chunk: list[tuple[int, Any]]) -> list[dict[str, Any]]:
    """The output lines of ``chunk`` (``(line number, request or _BadLine)`` pairs of `read_requests`) in
    order: bad lines' entries as they are, the rest from ``backend``; every error entry (no
    ``probabilities``: the server's 422 of a line that is not an object or fails validation too) carries
    its input ``line``. Raises `CommandError` when the backend answers another number of entries than
    it was sent."""
    sent = [r for _, r in chunk if not isinstance(r, _BadLine)]
    answers = iter(backend(sent) if sent else [])
    out = [r.entry if isinstance(r, _BadLine) else next(answers, None) for _, r in chunk]
    if any(a is None for a in out):
        raise CommandError(f"the backend answered fewer entries than the {len(sent)} requests sent")
    return [a if "probabilities" in a or "line" in a else {**a, "line": n} for (n, _), a in zip(chunk, out)]


def open_requests(path: str, defaults: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """`read_requests` with its first line already read: the file is opened and checked (and found to
    hold a request) before a model loads or an output is created. Raises `CommandError`."""
    requests = read_requests(path, defaults)
    first = next(requests, None)
    if first is None:
        raise CommandError(f"--input {path} holds no request")
    return itertools.chain([first], requests)


def _run_file(backend: Backend, requests: Iterator[Any], path: str, output: str | None, batch_size: int,
              quiet: bool) -> int:
    """Send ``requests`` (`open_requests` of ``path``) through ``backend`` ``batch_size`` at a time, each answer
    written and flushed as its batch returns (memory: about one batch). The progress total is counted
    (`count_lines`) in a thread meanwhile, so counting a big file never delays the first answer.
    Returns 1 when some line got an error; 130 on Ctrl-C (SIGINT), after one line saying how many answers were
    written (the first N requests of the input, in order: what a rerun on the rest needs to know)."""
    from .runtime.progress import Reporter

    try:
        out = open(output, "w", encoding="utf-8") if output else sys.stdout
    except OSError as exc:
        raise CommandError(f"cannot write --output {output}: {exc.strerror or exc}") from None
    counting = None
    if not quiet:
        _show_progress_lines()
        reporter = Reporter(None, "classify", "docs")
        counting = threading.Thread(target=lambda: reporter.set_total(count_lines(path)), daemon=True)
        counting.start()
    failed = sent = written = 0
    try:
        for chunk in _chunks(requests, batch_size):
            for answer in answer_chunk(backend, chunk):
                failed += "probabilities" not in answer
                out.write(json.dumps(answer, ensure_ascii=False) + "\n")
                written += 1
            out.flush()
            sent += len(chunk)
            if counting is not None:
                reporter.advance(len(chunk))
    except KeyboardInterrupt:
        out.flush()
        print(f"{PROG}: interrupted (Ctrl-C): {written} answer(s) written to {output or 'stdout'}, those of the "
              f"first {written} request(s) of {path} in order", file=sys.stderr, flush=True)
        return INTERRUPTED_EXIT
    finally:
        if output:
            out.close()
        if counting is not None:
            counting.join(5.0)
            reporter.close()
    if failed:
        print(f"{PROG}: {failed} of {sent} requests got an error (see their lines in "
              f"{output or 'the output'})", file=sys.stderr)
    return 1 if failed else 0


def _show_progress_lines() -> None:
    """Let `zsnli.runtime.progress`'s plain lines (stderr not a terminal) reach stderr."""
    from .runtime.progress import StderrHandler

    log = logging.getLogger("zsnli.runtime.progress")
    if not log.handlers:
        handler = StderrHandler()  # this call's stderr, also when a later call in the process has another
        handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def check_flags(args) -> None:
    """Refuse what ``classify``'s flags cannot mean (`CommandError`, one line naming the flag): an empty ``--url``,
    ``--model-dir``, ``--input`` or ``--output`` (an empty ``--url`` fell back to the default server unsaid),
    neither or both of a text and ``--input``, ``--json`` with ``--input`` (``--json`` prints one text's answer as a
    JSON object; ``--input`` writes every answer as a JSON line already) and ``--output`` with a text (a text's answer
    is printed: ``--output`` is where ``--input``'s answers go)."""
    for flag in ("--url", "--model-dir", "--input", "--output"):
        if getattr(args, flag[2:].replace("-", "_")) == "":
            raise CommandError(f"{flag} '': an empty value; " + (
                f"give the server's URL (default $ZSNLI_URL, else {DEFAULT_URL}), or leave the flag out"
                if flag == "--url" else "give a path, or leave the flag out"))
    if (args.text is None) == (args.input is None):
        raise CommandError("give a text to classify or --input FILE (one of the two)")
    if args.json and args.input is not None:
        raise CommandError("--json prints a single text's answer as one JSON object; with --input every answer is "
                           "already a JSON line: leave out --json")
    if args.output is not None and args.input is None:
        raise CommandError(f"--output {args.output}: it takes the answers of --input FILE; a text's answer is printed "
                           "(add --json for one JSON object)")


def classify(args) -> int:
    """``zsnli classify``: one text (a table, or ``--json``) or ``--input`` lines to ``--output``; the flags checked
    first (`check_flags`)."""
    check_flags(args)
    defaults = _defaults(args)
    if args.input is None and "candidate_labels" not in defaults:
        raise CommandError("--labels is required with a text (e.g. --labels sport,business,science)")
    requests = open_requests(args.input, defaults) if args.input is not None else None
    if args.model_dir is not None:
        backend = InProcess(args.model_dir)
        closer = backend.close
    else:
        url = args.url if args.url is not None else os.environ.get("ZSNLI_URL") or DEFAULT_URL
        problem = url_problem(url)
        if problem:
            raise CommandError(f"{'--url' if args.url is not None else 'ZSNLI_URL'}: {problem}")
        backend, client = http_backend(url, args.timeout, args.batch_size)
        closer = client.close
    try:
        if args.input is None:
            doc = {"text": args.text, **defaults}
            return _print_one(doc, backend([doc])[0], args.json)
        return _run_file(backend, requests, args.input, args.output, args.batch_size, args.quiet)
    finally:
        closer()


def serve(argv: Sequence[str]) -> int:
    """``zsnli serve``: ``serve.sh`` in Python: offline (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``)
    unless ``ZSNLI_ALLOW_DOWNLOAD`` is on, then `zsnli.serve.main` (exit 0 after a drained SIGTERM,
    3 on a refused start, 1 when the model failed to load). Set before any hub library is imported."""
    allow = os.environ.get("ZSNLI_ALLOW_DOWNLOAD", "0").strip().lower() in _TRUE
    os.environ["HF_HUB_OFFLINE"] = "0" if allow else "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from .serve import main as serve_main

    return serve_main(list(argv), prog=f"{PROG} serve")


@one_line_errors(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``zsnli`` console script; returns the exit code (0 ok, 1 some input lines
    got errors, 2 a usage mistake or a failure, stated in one line, 130 interrupted by Ctrl-C, one line (with ``--input``,
    saying what was written); ``serve``: as ``serve.sh``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    from .client import ZsnliError

    try:
        return classify(args)
    except (CommandError, ZsnliError) as exc:
        print(f"{PROG}: error: {one_line(exc)}{error_hint(exc)}", file=sys.stderr)
        return 2


def error_hint(exc: BaseException) -> str:
    """What to do, after the error line: start a server when none answered (``ConnectionFailed``); on a 401, set
    ``ZSNLI_API_KEY`` (the variable this command sends as ``Authorization: Bearer``), or fix it when it is set."""
    if type(exc).__name__ == "ConnectionFailed":
        return " (start one with `zsnli serve`, or classify in-process with --model-dir)"
    if getattr(exc, "status", None) == 401 or "HTTP 401)" in str(exc):
        if os.environ.get("ZSNLI_API_KEY", "").strip():
            return " (ZSNLI_API_KEY is set, but is not the key this server was started with: set ZSNLI_API_KEY to it)"
        return " (the server needs an API key: set ZSNLI_API_KEY to the key it was started with)"
    return ""


if __name__ == "__main__":
    raise SystemExit(main())
