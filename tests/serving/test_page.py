"""The web page in a real browser (Debian's chromium driven by playwright) against a uvicorn server: pronounce a
word with its n-best and attention map, stream a generation to its end, stop one mid-stream, classify a name,
draw a forecast, and show the API's error for a bad input."""

from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import Page

from seqlab.recipes.system import GenerationRequest
from seqlab.serving import ServedModel

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="no chromium (apt-get install -y chromium) to drive"
)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """pytest-playwright's chromium is Debian's (playwright cannot download its own here), without the sandbox
    that needs privileges a container lacks."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": ["--no-sandbox"]}


@pytest.fixture
def page(page: Page, server_url: str) -> Page:
    """pytest-playwright's page, on the served web page once it has listed the models."""
    page.set_default_timeout(20_000)
    page.goto(server_url)
    page.wait_for_selector("body[data-ready='1']")
    return page


def test_pronounce_a_word(page, models: dict[str, ServedModel]) -> None:
    page.select_option("#model", "g2p_v0_1")
    page.fill("#predict-input", "cat")
    page.click("#predict-button")
    page.wait_for_selector("#predict-output table.nbest")
    expected = models["g2p_v0_1"].system.predict(["cat"])[0]
    assert page.inner_text("#predict-output pre") == "\n".join(expected.lines())
    assert page.locator("#predict-output table.nbest tr").count() == 1 + 5  # header and the 5-best
    page.wait_for_selector("#attention-block:not([hidden])")
    assert page.eval_on_selector("#attention-canvas", "c => c.width") > 50
    assert "cross" in page.inner_text("#attention-map")


def test_stream_a_generation_to_its_end(page, models: dict[str, ServedModel]) -> None:
    page.select_option("#model", "lm_gpt_9a192c4")
    page.fill("#prompt", "The ")
    page.uncheck("#do-sample")
    page.fill("#max-new-tokens", "60")
    page.click("#generate-button")
    page.wait_for_function("document.getElementById('generation-status').textContent === 'done'")
    request = GenerationRequest("The ", max_new_tokens=60, do_sample=False)
    continuation = "".join(c.text for c in models["lm_gpt_9a192c4"].system.generate(request))
    assert page.text_content("#generation") == "The " + continuation + "\n"  # the prompt, the stream, its end


def test_stop_mid_stream(page, models: dict[str, ServedModel]) -> None:
    endless = models["endless"].system
    endless.closed.clear()
    page.select_option("#model", "endless")
    page.fill("#prompt", "la")
    page.click("#generate-button")
    page.wait_for_function("document.getElementById('generation').textContent.includes('la la la')")
    page.click("#stop-button")
    page.wait_for_function("document.getElementById('generation-status').textContent === 'stopped'")
    assert endless.closed.wait(10), "stopping in the page did not close the server's generator"
    assert page.is_enabled("#generate-button") and page.is_disabled("#stop-button")


def test_classify_a_name(page) -> None:
    page.select_option("#model", "classify_9a192c4")
    page.fill("#predict-input", "Tanaka")
    page.click("#predict-button")
    page.wait_for_selector("#predict-output table.probabilities")
    assert page.locator("#predict-output table.probabilities tr").count() >= 2


def test_draw_a_forecast(page) -> None:
    page.select_option("#model", "forecast_tiny")
    page.fill("#series", "\n".join(str(v) for v in range(20)))
    page.click("#forecast-button")
    page.wait_for_selector("#forecast-chart polyline")
    assert page.locator("#forecast-chart polyline").count() == 2  # the series and its forecast
    assert page.inner_text("#forecast-output").startswith("values +1  ")


def test_an_error_is_shown(page) -> None:
    page.select_option("#model", "g2p_v0_1")
    page.fill("#predict-input", "c@t")
    page.click("#predict-button")
    page.wait_for_selector("#error", state="visible")
    assert "@" in page.inner_text("#error")
    page.fill("#predict-input", "cat")
    page.click("#predict-button")
    page.wait_for_selector("#error", state="hidden")
