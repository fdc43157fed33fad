"""The job page's download links with object storage (#17): the orchestrator answers the
link with a redirect to a presigned URL of the bucket (moto's S3 server here), and the browser
saves the bytes the bucket sends, which match the API's sha256."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.artifact_uploads import Attempt, s3_serving, sha
from tests.browser.conftest import sign_in
from tests.e2e.conftest import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> Iterator[ServerProcess]:
    """The orchestrator the browser fixtures use: its artifacts in a bucket."""
    yield from s3_serving(tmp_path_factory.mktemp("orchestrator-s3"), s3_endpoint)


def test_a_click_downloads_from_the_bucket_the_bytes_the_api_lists(
    server: ServerProcess, page: Page, tmp_path: Path
) -> None:
    model = secrets.token_bytes(150_000)
    attempt = Attempt(server)
    attempt.upload("output/model.bin", model)
    attempt.finish()
    with server.admin() as admin:
        listed = admin.get(f"/api/queue/{attempt.job_id}/artifacts").json()["artifacts"]
        assert (
            admin.get(f"/api/queue/{attempt.job_id}/artifacts/output/model.bin").status_code == 307
        )
    sign_in(page, server.admin_key, then=f"/queue/{attempt.job_id}")
    link = page.locator("#artifacts a", has_text="output/model.bin")
    expect(link).to_have_count(1)
    with page.expect_download() as download:
        link.click()
    saved = tmp_path / "model.bin"
    download.value.save_as(saved)
    assert sha(saved.read_bytes()) == listed[0]["sha256"] == sha(model)
