"""zsnli.bench.idle_clients: argument checks and one short run against a spawned tiny-model server (structure and
statuses only: the times are the benchmark's, not a test's)."""

from __future__ import annotations

import json

import pytest

from bench_support import refused
from zsnli.bench import idle_clients


@pytest.mark.parametrize("argv, option", [
    (["--url", "http://10.0.0.1:8000"], "--url"), (["--url", "http://127.0.0.1:1", "--idle", "a,b"], "--idle"),
    (["--url", "http://127.0.0.1:1", "--idle", "-3"], "--idle"), (["--model-dir", "/no/such/dir"], "--model-dir"),
    (["--url", "http://127.0.0.1:1", "--probes", "0"], "--probes"),
])
def test_refuses_bad_arguments(capsys, argv, option):
    assert option in refused(capsys, lambda: idle_clients.parse_args(argv))


def test_fresh_clients_beside_more_idle_clients_than_the_cap_are_served(bert_dir, tmp_path, capsys):
    out = tmp_path / "idle.json"
    code = idle_clients.main(["--model-dir", str(bert_dir), "--idle", "0,7", "--max-connections", "4",
                              "--probes", "3", "--json", str(out)])
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [r["idle"] for r in rows] == [0, 7] and code == 0, printed
    assert all(r["statuses"] == {"200": 3} for r in rows), rows
    assert rows[1]["idle_closed_by_server"] >= 4  # 7 idle beside a cap of 4: the longest idle were shed
