"""zsnli.harness.examples: the one examples reader and writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from zsnli.harness.examples import (
    DEV_EXAMPLES, Example, ExamplesError, first_existing, load_examples, parse_examples, write_examples,
)

ROWS = [{"id": i, "dataset": "ab"[i % 2], "text": f"text {i}", "labels": ["x", "y"], "label": i % 2} for i in range(6)]


def test_parse_examples_errors_name_the_line():
    good = '{"id": "x", "dataset": "d", "text": "t", "labels": ["a", "b"], "label": 1}'
    assert parse_examples([good])[0].labels == ("a", "b")
    with pytest.raises(ExamplesError, match=r"f:2: missing field 'label'"):
        parse_examples([good, '{"id": "y", "dataset": "d", "text": "t", "labels": ["a"]}'], "f")
    with pytest.raises(ExamplesError, match="duplicate id"):
        parse_examples([good, good], "f")
    with pytest.raises(ExamplesError, match="not JSON"):
        parse_examples(["{"], "f")
    with pytest.raises(ExamplesError, match="no examples"):
        parse_examples(["", "  "], "f")


def test_write_then_load_round_trips_and_limits(tmp_path):
    examples = parse_examples([json.dumps(r) for r in ROWS])
    path = write_examples(tmp_path / "e.jsonl", examples)
    loaded = load_examples(path)
    assert loaded.examples == examples and len(loaded.sha256) == 64
    first = load_examples(path, limit=4)
    assert [e.id for e in first.examples] == [0, 1, 2, 3] and first.sha256 != loaded.sha256
    assert first.notes == ["first 4 of 6 documents"]
    per = load_examples(path, max_per_dataset=2, limit=3)
    assert [e.id for e in per.examples] == [0, 1, 2]
    assert load_examples(path, limit=10).sha256 == loaded.sha256


def test_a_missing_file_says_what_to_pass(tmp_path):
    with pytest.raises(ExamplesError) as info:
        load_examples(tmp_path / "missing.jsonl")
    message = str(info.value)
    assert "missing.jsonl" in message and "--examples PATH" in message and "hub:btzsc" in message
    assert "\n" not in message


def test_a_utf8_bom_is_skipped_and_its_extra_fields_still_make_slices(tmp_path):
    """As ``zsnli classify --input`` reads it: the mark is no part of the first row (nor of its metadata)."""
    from zsnli.compare.slices import read_metadata

    lines = [json.dumps(dict(r, source="mail")) for r in ROWS]
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    loaded = load_examples(marked)
    assert loaded.examples == load_examples(plain).examples
    assert read_metadata(marked, loaded.examples)[0] == {"source": "mail"}


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
                                           ("utf-32-le", b"\xff\xfe\x00\x00"), ("utf-16-le", b"")])
def test_utf16_and_utf32_are_named_with_the_iconv_fix_in_zsnli_classifys_words(tmp_path, encoding, bom):
    from zsnli.cli import CommandError, check_encoding

    path = tmp_path / "e.jsonl"
    path.write_bytes(bom + (json.dumps(ROWS[0]) + "\n").encode(encoding))
    with pytest.raises(ExamplesError) as info:
        load_examples(path)
    message = str(info.value)
    assert "\n" not in message and "iconv -f UTF-" in message and "codec" not in message
    with pytest.raises(CommandError) as classify:  # the same file given to zsnli classify --input
        check_encoding(str(path), path.read_bytes()[:4096])
    assert message == str(classify.value).replace("--input ", "", 1)


def test_bytes_that_are_not_utf8_are_one_line_naming_the_file_and_line(tmp_path):
    """The line was not named (the server names the byte of a body: a file names its line)."""
    path = tmp_path / "latin.jsonl"
    latin = json.dumps(ROWS[1]).encode("utf-8").replace(b"text 1", b"caf\xe9")  # Latin-1
    path.write_bytes(json.dumps(ROWS[0]).encode("utf-8") + b"\n" + latin + b"\n")
    column = latin.index(b"\xe9") + 1
    with pytest.raises(ExamplesError) as refused:
        load_examples(path)
    assert str(refused.value) == f"{path}: not UTF-8 (byte 0xe9 on line 2 (byte {column} of the line)): JSONL is UTF-8"


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_json_error_on_a_line_is_about_the_line_alone(tmp_path, ending):
    """``{"id": "x", "text": "broken`` said "Invalid control character (column 28)": the line was parsed with its
    newline, so an unterminated string ran into it."""
    path = tmp_path / "bad.jsonl"
    path.write_bytes((json.dumps(ROWS[0]) + ending + '{"id": "x", "text": "broken' + ending).encode())
    with pytest.raises(ExamplesError) as refused:
        load_examples(path)
    assert str(refused.value) == f"{path}:2: not JSON (Unterminated string (column 21))"


def test_first_existing_picks_the_first_file(tmp_path):
    (tmp_path / "b.jsonl").write_text("")
    assert first_existing("a.jsonl", "b.jsonl", base=tmp_path) == tmp_path / "b.jsonl"
    assert first_existing("a.jsonl", base=tmp_path) is None


def test_the_repository_dev_set_loads():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    loaded = load_examples(os.path.join(root, DEV_EXAMPLES))
    assert len(loaded.examples) > 100 and all(isinstance(e, Example) for e in loaded.examples)


def test_hub_btzsc_fails_clearly_offline(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    code = "from zsnli.harness.examples import load_examples\nload_examples('hub:btzsc')"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "ExamplesError" in proc.stderr and "network" in proc.stderr


def test_the_documented_examples_format_is_what_the_reader_reads_and_every_examples_flag_names_its_fields(
        tmp_path, capsys):
    """docs/bakeoff.md gives the format (the bake-off help said only "DESIGN.md format"): its example lines load,
    they carry every field the reader needs, and each --examples help names those fields."""
    import re
    from pathlib import Path

    from zsnli.compare.cli import main as validate_main
    from zsnli.compare.slices import FORMAT_FIELDS

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "bakeoff.md").read_text(encoding="utf-8")
    block = re.search(r"## The examples file.*?```json\n(.*?)```", doc, re.DOTALL)
    assert block and doc.index("## The examples file") < doc.index("## Compare")
    path = tmp_path / "doc.jsonl"
    path.write_text(block.group(1), encoding="utf-8")
    rows = [json.loads(line) for line in block.group(1).splitlines()]
    assert len(load_examples(path).examples) == len(rows) >= 2 and all(set(FORMAT_FIELDS) <= set(r) for r in rows)
    for argv in (["bakeoff", "--help"], ["compare", "--help"], ["--help"]):
        with pytest.raises(SystemExit):
            validate_main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "id, dataset, text, labels (the candidate label names), label (the index of the gold one in labels)" \
            in text, argv
