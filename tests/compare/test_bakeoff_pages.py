"""The bake-off pages serve the one report renderer; their links never come from request headers;
ZSNLI_PUBLIC_URL is checked. (The renderer itself: test_render.)"""

from __future__ import annotations

import json
import re

import pytest

MAJORITY_ONLY = {"task_description": "support", "candidates": ["majority"],
                 "examples": [{"input": "Cannot sign in", "expected": "access"},
                              {"input": "Refund my invoice", "expected": "billing"}]}


@pytest.fixture
def bakeoff_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))


@pytest.mark.anyio
@pytest.mark.parametrize("public, base", [(None, ""), ("https://zsnli.example.com/x", "https://zsnli.example.com/x/")])
async def test_links_come_from_zsnli_public_url_never_from_host(bert_dir, bakeoff_env, public, base):
    from bakeoff_support import make_bakeoff_app
    from conftest import running_app

    # the name listed, so the Host check (DNS rebinding, zsnli.serving.origin_check) lets the forged Host through
    app = make_bakeoff_app(bert_dir, public_url=public, allowed_hosts="evil.example")
    forged = {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "Forwarded": "host=evil.example"}
    async with running_app(app) as client:
        answer = (await client.post("/v1/bakeoff", json=MAJORITY_ONLY, headers=forged)).json()
        pages = [await client.get(path, headers=forged) for path in (f"/bakeoffs/{answer['id']}", "/bakeoff")]
        stored = (await client.get(f"/v1/bakeoffs/{answer['id']}")).json()
        report_file = await client.get(f"/bakeoffs/{answer['id']}/report.html")
    from zsnli.compare.render import render_html, report_html

    assert report_file.status_code == 200 and report_file.text == render_html(stored)  # the CLI's HTML file
    assert report_html(stored) in pages[0].text
    for page in pages:
        assert page.status_code == 200
        assert "evil.example" not in page.text
    badge = re.search(r"id='badge-markdown'>\[!\[bake-off\]\((.*?)bakeoffs/", pages[0].text).group(1)
    assert badge == (base or "/")
    assert "evil.example" not in json.dumps(answer)


@pytest.mark.parametrize("raw", ["evil.example", "ftp://x.example/", "https://", "https://x.example/?a=1",
                                 "https://x.example/#f", "https://user@x.example/", "https://x.example:99999/",
                                 "https://x.example/<script>"])
def test_bad_public_url_is_one_line_naming_the_setting(raw):
    from zsnli.config import Settings, SettingsError

    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_PUBLIC_URL": raw})
    assert str(err.value).startswith("ZSNLI_PUBLIC_URL must be") and "\n" not in str(err.value)


def test_public_url_is_normalised_with_a_trailing_slash():
    from zsnli.config import Settings

    assert Settings.from_env({"ZSNLI_PUBLIC_URL": " https://zsnli.example.com "}).public_url == "https://zsnli.example.com/"
    assert Settings.from_env({}).public_url is None and Settings.from_env({"ZSNLI_PUBLIC_URL": ""}).public_url is None
