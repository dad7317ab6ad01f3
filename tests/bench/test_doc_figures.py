"""The figures of README.md and docs/ are those of the committed model and calibration (issue 32 item 3).

Every generated block (``<!-- figures:NAME -->``) has a generator in `zsnli.bench.doc_figures`. The cheap
ones are recomputed here and compared with what is committed: the bake-off tables against
``baselines/main.json`` (which must itself be a run of the committed model and calibration), and, on the
shipped model in this process (the app with the served routes, no network), the README's curl answers,
its client snippet's printed output, its ``zsnli classify`` output, the Inference API and ``/predict``
examples of docs/api.md and the bake-off service example's figures. When one fails after a change of
``model/`` or ``calibration.json``: ``python -m zsnli.bench.doc_figures --write --run-bakeoff``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import re
import sys
import types

import numpy as np
import pytest
from conftest import REPO, cached_loader, make_settings, running_app

from zsnli.bench import doc_figures, doc_tables

pytestmark = pytest.mark.anyio

HOW = "regenerate with: python -m zsnli.bench.doc_figures --write --run-bakeoff"
#: Rounding to 6 decimals and the machine's last digits (CPU kernels, threads): committed figures may differ
#: from a rerun by a few units of the 6th decimal; any change of model or calibration moves them far more.
ATOL = 5e-6


def _blocks() -> dict[str, str]:
    out = {}
    for page in doc_figures.pages(REPO):
        for name, body in doc_figures.blocks(page.read_text(encoding="utf-8")):
            assert name not in out, f"block {name} appears twice"
            out[name] = body
    return out


BLOCKS = _blocks()


def test_every_generated_block_has_a_generator():
    assert {"curl-readme", "readme-client", "readme-cli", "bakeoff-escalation", "bakeoff-slices",
            "bakeoff-service", "parity-figure"} <= set(BLOCKS)
    assert all(doc_figures.generator_for(name) for name in BLOCKS)
    for name, body in BLOCKS.items():
        if name.startswith("curl-"):
            for line in body.splitlines():
                if line.startswith("curl "):
                    doc_figures.curl_request(line)  # parses


def test_unknown_block_names_are_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("<!-- figures:nonsense -->\nx\n<!-- /figures:nonsense -->\n")
    with pytest.raises(SystemExit) as info:
        doc_figures.main(["--root", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "\n" not in err and "unknown block name(s): nonsense" in err


def test_the_bakeoff_report_is_a_run_of_the_committed_model_and_calibration():
    report = json.loads((REPO / "baselines" / "main.json").read_text())
    served = next(a for a in report["arms"] if a["type"] == "served")["identity"]
    manifest = json.loads((REPO / "training_manifest.json").read_text())
    calibration = hashlib.sha256((REPO / "calibration.json").read_bytes()).hexdigest()
    assert served["calibration_sha256"] == calibration, f"baselines/main.json is of another calibration.json: {HOW}"
    assert served["model_sha256"] == manifest["model_sha256"], f"baselines/main.json is of another model: {HOW}"


@pytest.mark.parametrize("name", ["bakeoff-ranking", "bakeoff-escalation", "bakeoff-slices", "quality-oof",
                                  "quality-summary", "quality-public", "quality-chosen", "readme-quality"])
def test_tables_are_the_committed_report_and_calibration(name):
    fig = doc_figures.Figures(REPO, "model", REPO / "baselines" / "main.json")
    try:
        assert doc_figures.generator_for(name)(fig, BLOCKS[name]).rstrip("\n") == BLOCKS[name].rstrip("\n"), HOW
    finally:
        fig.close()


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def _same_answer(committed: str, fresh: object, where: str) -> None:
    """The committed answer line and a fresh answer: the same JSON but for the machine's last digits."""
    got = json.loads(doc_tables.answer_json(fresh))
    want = json.loads(committed)
    _close(want, got, where)


def _close(want, got, where):
    if isinstance(want, float) or isinstance(got, float):
        assert abs(want - got) <= ATOL, f"{where}: committed {want}, now {got}; {HOW}"
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {want} vs {got}; {HOW}"
        for w, g in zip(want, got):
            _close(w, g, where)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys {set(want)} vs {set(got)}; {HOW}"
        for k in want:
            _close(want[k], got[k], f"{where}.{k}")
    else:
        assert want == got, f"{where}: committed {want!r}, now {got!r}; {HOW}"


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def shipped(tmp_path_factory):
    """The app on the shipped model and calibration with the served routes (bake-off included)."""
    import os

    from zsnli.serve import served_extensions
    from zsnli.serving.app import create_app

    tmp = tmp_path_factory.mktemp("bakeoff")
    os.environ["ZSNLI_BAKEOFF_DB"], os.environ["ZSNLI_RECEIPT_KEY"] = str(tmp / "b.sqlite3"), str(tmp / "key.pem")
    app = create_app(make_settings(REPO / "model"), loader=cached_loader, extend=served_extensions())
    try:
        async with running_app(app, timeout=300) as client:
            health = (await client.get("/health")).json()
            assert health["verified"] and health["calibrated"], health
            yield client
    finally:
        os.environ.pop("ZSNLI_BAKEOFF_DB"), os.environ.pop("ZSNLI_RECEIPT_KEY")


@pytest.mark.parametrize("name", ["curl-readme", "curl-zero-shot", "curl-predict"])
async def test_curl_answers_are_the_shipped_models(shipped, name):
    lines = BLOCKS[name].splitlines()
    checked = 0
    for i, line in enumerate(lines):
        if line.startswith("curl "):
            path, body = doc_figures.curl_request(line)
            r = await shipped.post(path, json=body)
            assert r.status_code == 200, r.text
            _same_answer(lines[i + 1].removeprefix("# -> "), r.json(), f"{name} {path}")
            checked += 1
    assert checked


async def test_the_readme_client_snippet_prints_its_comments(shipped):
    """The snippet runs with `zsnli.Client` answering through the app in this process; each print line's
    comment is what it printed."""
    from zsnli.client import Classification, classify_body

    loop = asyncio.get_running_loop()

    class InProcessClient:
        def __init__(self, url):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def classify(self, text, labels, *, hypothesis_template=None, multi_label=False, id=None, scoring=None):
            body = classify_body(text, labels, hypothesis_template, multi_label, id, scoring)
            r = asyncio.run_coroutine_threadsafe(shipped.post("/classify", json=body), loop).result()
            return Classification(list(labels), r.json()["probabilities"], r.json().get("id"))

        def zero_shot_classification(self, *args, **kwargs):
            return None

    body = BLOCKS["readme-client"]
    code = body.split("```python\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType("zsnli_snippet")
    module.Client = InProcessClient
    printed = io.StringIO()

    def run():
        with contextlib.redirect_stdout(printed):
            exec(compile(code.replace("from zsnli import Client", "from zsnli_snippet import Client"), "snippet", "exec"),
                 {})

    sys.modules["zsnli_snippet"] = module
    try:
        await asyncio.to_thread(run)
    finally:
        del sys.modules["zsnli_snippet"]
    comments = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.lstrip().startswith("print(")]
    outputs = printed.getvalue().splitlines()
    assert len(comments) == len(outputs) == 2
    for comment, output in zip(comments, outputs):
        assert comment.split(" ")[0] == output.split(" ")[0], (comment, output, HOW)
        np.testing.assert_allclose(_numbers(comment), _numbers(output), atol=1e-4, err_msg=HOW)


def test_the_readme_cli_output_is_its_own(capsys):
    import shlex

    from zsnli.cli import main

    lines = BLOCKS["readme-cli"].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('$ zsnli classify "'))
    committed = []
    for line in lines[start + 1:]:
        if line.startswith("$ ") or line.startswith("```"):
            break
        committed.append(line)
    args = shlex.split(lines[start][2:])[1:]
    assert main([*args, "--model-dir", str(REPO / "model")]) == 0
    fresh = capsys.readouterr().out.splitlines()
    assert [c.split()[0] for c in committed] == [f.split()[0] for f in fresh], HOW
    np.testing.assert_allclose(_numbers("\n".join(committed)), _numbers("\n".join(fresh)), atol=1e-4, err_msg=HOW)


async def test_the_bakeoff_service_examples_figures_are_the_shipped_models(shipped):
    body = BLOCKS["bakeoff-service"]
    request = json.loads(body.split("-d '", 1)[1].split("'", 1)[0])
    committed = body.split("```json\n", 1)[1].split("```", 1)[0]
    want = {card["arm"]: card for card in (json.loads(line.strip().rstrip(",").rstrip("]"))
                                           for line in committed.splitlines() if line.strip().startswith('{"rank"'))}
    r = await shipped.post("/v1/bakeoff", json=request)
    assert r.status_code == 200, r.text
    got = {card["arm"]: card for card in r.json()["scorecard"]}
    assert set(got) == set(want)
    fresh_rank = doc_figures.tied_ranks([{k: round(v, 4) if isinstance(v, float) else v for k, v in c.items()}
                                         for c in r.json()["scorecard"]])
    committed_rank = doc_figures.tied_ranks(list(want.values()))
    assert fresh_rank == committed_rank, HOW
    for arm, card in want.items():
        for key in ("accuracy", "macro_f1", "ece", "n", "status"):
            fresh = round(got[arm][key], 4) if isinstance(got[arm][key], float) else got[arm][key]
            assert fresh == pytest.approx(card[key], abs=1e-4), f"{arm} {key}: committed {card[key]}, now {fresh}; {HOW}"


def test_the_check_leaves_out_what_varies_by_nature_and_compares_the_rest():
    """Issue 40 (3): a rerun's new bake-off id, timestamp, latencies, seconds over HTTP, receipt, CPU
    flags and last-digit rounding are not differences; a moved score, count or word is."""
    service = BLOCKS["bakeoff-service"]
    rerun = re.sub(r"bo_[0-9a-f]{32}", "bo_" + "0" * 32, service)
    rerun = re.sub(r'"created_at": "[^"]+"', '"created_at": "2031-01-01T00:00:00.000000Z"', rerun)
    rerun = re.sub(r'"latency_ms_p50": [\d.]+', '"latency_ms_p50": 987.6', rerun)
    rerun = re.sub(r"[\d.]+ s over HTTP", "42.0 s over HTTP", rerun)
    rerun = re.sub(r'"(sha256|signature|key_id)": "[^"]+"', r'"\1": "other"', rerun)
    assert rerun != service and doc_figures.same_figures(service, rerun)
    assert not doc_figures.same_figures(service, service.replace('"accuracy": 1.0', '"accuracy": 0.6667', 1))
    assert not doc_figures.same_figures(service, service.replace('"n": 3', '"n": 4', 1))
    assert not doc_figures.same_figures(service, service.replace('"winner": "served"', '"winner": "majority"'))

    parity = BLOCKS["parity-figure"]
    moved = re.sub(r"\|difference\| [\d.e-]+", "|difference| 7.7e-07", parity).replace(
        "CPU avx2 avx512_bf16 avx512f", "CPU avx2")
    assert doc_figures.same_figures(parity, moved)
    assert not doc_figures.same_figures(parity, re.sub(r"\|difference\| [\d.e-]+", "|difference| 3.1e-03", parity))
    assert not doc_figures.same_figures(parity, parity.replace("316/316", "315/316"))

    predict = BLOCKS["curl-predict"]
    score = re.search(r'"score":(0\.\d{6})', predict)[1]
    last_digit = f"{float(score) + 1e-6:.6f}"
    assert doc_figures.same_figures(predict, predict.replace(score, last_digit))
    assert not doc_figures.same_figures(predict, predict.replace(score, f"{float(score) + 1e-3:.6f}"))


def test_arms_tied_on_every_reproducible_figure_may_swap_places_but_no_other_arm_may():
    """CI failure of stop 54: majority and keyword_rules tie on macro-F1 and ECE, the ranking rule then
    orders them by p50 latency (0.04 ms against 0.05 ms), and another CPU swapped them. The group's place is
    a figure; the order inside it is not."""
    service = BLOCKS["bakeoff-service"]
    lines = service.split("\n")
    at = {json.loads(m["card"])["arm"]: i for i, m in ((i, doc_figures.CARD_LINE.match(line))
                                                       for i, line in enumerate(lines)) if m}

    def swapped(a: str, b: str) -> str:
        out = list(lines)
        ca, cb = (json.loads(doc_figures.CARD_LINE.match(lines[at[x]])["card"]) for x in (a, b))
        for x, card, rank in ((a, cb, ca["rank"]), (b, ca, cb["rank"])):
            m = doc_figures.CARD_LINE.match(lines[at[x]])
            out[at[x]] = m["lead"] + json.dumps({**card, "rank": rank}) + m["tail"]
        return "\n".join(out)

    cards = [json.loads(doc_figures.CARD_LINE.match(lines[i])["card"]) for i in sorted(at.values())]
    ranks = doc_figures.tied_ranks(cards)
    tied = [c["arm"] for c in cards if ranks[c["arm"]] != c["rank"]]
    assert tied, "the committed example has arms tied on macro-F1 and ECE (what this test is about)"
    leader = next(c["arm"] for c in cards if ranks[c["arm"]] == ranks[tied[0]])
    assert ranks[tied[0]] == ranks[leader] < next(c["rank"] for c in cards if c["arm"] == tied[0])
    assert doc_figures.same_figures(service, swapped(leader, tied[0]))
    assert not doc_figures.same_figures(service, swapped(cards[0]["arm"], cards[1]["arm"]))
    assert doc_figures.tied_ranks([{"rank": 1, "arm": "a", "status": "scored", "macro_f1": 0.5, "ece": 0.1},
                                   {"rank": 2, "arm": "b", "status": "scored", "macro_f1": 0.5, "ece": 0.1},
                                   {"rank": 3, "arm": "c", "status": "scored", "macro_f1": 0.5, "ece": 0.2},
                                   {"rank": 4, "arm": "d", "status": "failed", "macro_f1": None, "ece": None},
                                   {"rank": 5, "arm": "e", "status": "failed", "macro_f1": None, "ece": None}]) == \
        {"a": 1, "b": 1, "c": 3, "d": 4, "e": 5}


def test_the_check_names_each_block_as_it_starts(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "calibration.json").write_text((REPO / "calibration.json").read_text())
    page = "".join(f"<!-- figures:{n} -->\n{BLOCKS[n]}<!-- /figures:{n} -->\n" for n in ("quality-chosen", "quality-oof"))
    (tmp_path / "docs" / "quality.md").write_text(page)
    assert doc_figures.main(["--root", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "[1/2] docs/quality.md: quality-chosen" in err and "[2/2] docs/quality.md: quality-oof" in err


def test_the_kind_table_shows_both_ways_and_the_compared_run_beside_the_shipped_one():
    """Issue 42: leave one dataset out and leave one kind out, each with the compared run's figures beside."""
    import json

    from zsnli.bench.doc_tables import kind_weighted_table

    selection = json.loads((REPO / "calibration.json").read_text())["selection"]
    table = kind_weighted_table(selection)
    kw = selection["kind_weighted"]
    assert "leave one kind out, zsc-dev" in table
    loko = kw["leave_one_kind_out"]["served"]["weighted_normalised"]
    assert f"| served arm (shipped) | {loko:.2f} |" in table
    other = kw["compared_with"]
    assert f"encoder {other['embedding_sha256'][:12]}) | {other['served_leave_one_dataset_out']['weighted_normalised']:.2f} |" in table
    without = {**selection, "kind_weighted": {k: v for k, v in kw.items() if k != "compared_with"}}
    assert "compared run" not in kind_weighted_table(without)


def test_a_changed_prose_figure_fails_the_check_unless_a_block_says_how_to_reproduce_it(tmp_path, capsys):
    """Issue 49: a figure outside every block (the stale "Validate" paragraph's kind) is held by the ledger: a
    changed one fails ``doc_figures`` (exit 1, naming the page and the figures); one inside a ``measured`` block
    that gives its command may change; ``--record-prose`` records a deliberate change."""
    from zsnli.bench import doc_prose

    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "quality.md"
    measured = "<!-- measured: python -m zsnli.bench.speed_rounds -->\nratio 2.34x\n<!-- /measured -->\n"
    page.write_text("Mean normalised score 67.2 at 9.58 docs/s (zsnli 0.1.0 on 127.0.0.1).\n" + measured)
    assert doc_figures.main(["--root", str(tmp_path), "--record-prose"]) == 0
    assert doc_prose.recorded(tmp_path) == {"docs/quality.md": {"67.2": 1, "9.58": 1}}
    assert doc_figures.main(["--root", str(tmp_path)]) == 0
    page.write_text(page.read_text().replace("2.34x", "36.8x"))  # a measured figure may move with its rerun
    assert doc_figures.main(["--root", str(tmp_path)]) == 0
    page.write_text(page.read_text().replace("67.2", "90.2"))
    capsys.readouterr()
    assert doc_figures.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "docs/quality.md: new 90.2; gone 67.2" in err and "<!-- measured: COMMAND -->" in err
    page.write_text(page.read_text().replace("<!-- measured: python -m zsnli.bench.speed_rounds -->",
                                             "<!-- measured: -->"))
    assert doc_figures.main(["--root", str(tmp_path)]) == 1
    assert "must say how its figures are reproduced" in capsys.readouterr().err


def test_the_committed_prose_figures_are_the_ledgers():
    """Every decimal figure of README.md and docs/ outside a block is the one docs/prose_figures.json records."""
    from zsnli.bench import doc_prose

    assert doc_prose.prose_changes(REPO, doc_figures.pages(REPO)) == [], \
        "a prose figure changed: put it in a <!-- measured: COMMAND --> block, or --record-prose"
