"""The Gradio demo, driven through its API and in a real headless Chromium."""

import shutil
import socket
from pathlib import Path

import pytest

from apps.demo import launch
from tests.pipelines.test_llamagen_pipeline import tiny_c2i_pipeline

SCREENSHOTS = Path(__file__).resolve().parents[2] / "outputs" / "screenshots"
SETTINGS = dict(window=16, guidance=2.0, temperature=1.0, top_k=0, zipar=8, lk=1000, ld=0.1, gr=7, gg=0.15, gd=0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app():
    pipe = tiny_c2i_pipeline(class_names=("circle", "square", "stripes"))
    port = free_port()
    demo = launch(pipe, port=port, block=False)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def call(url, seed="0", methods=("sjd", "mc-sjd"), **overrides):
    from gradio_client import Client

    s = {**SETTINGS, **overrides}
    return Client(url, verbose=False).predict(
        "square", list(methods), seed, s["window"], s["guidance"], s["temperature"], s["top_k"], s["zipar"],
        s["lk"], s["ld"], s["gr"], s["gg"], s["gd"], api_name="/generate",
    )


def test_generate_round_trip_returns_images_and_stats(app):
    images, table, heatmaps, status = call(app)
    rows = table["data"]
    assert [r[0] for r in rows] == ["ar", "sjd", "mc-sjd"]
    assert rows[0][2] == 16 and all(1 <= r[2] <= 16 for r in rows)  # forward passes
    assert all(r[1] == "yes" for r in rows)
    assert len(images) == 3 and len(heatmaps) == 3
    assert status.startswith("Done")


def test_two_requests_at_once_get_their_own_results(app):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda m: call(app, methods=m), [("sjd",), ("zipar+mc-sjd",)])
    assert [r[0] for r in a[1]["data"]] == ["ar", "sjd"]
    assert [r[0] for r in b[1]["data"]] == ["ar", "zipar+mc-sjd"]


@pytest.mark.parametrize(
    "overrides,message",
    [(dict(window=0), "window must be a whole number >= 1"), (dict(seed="abc"), "seed must be a whole number"),
     (dict(top_k=-5), "top-k must be a whole number >= 0")],
)
def test_invalid_settings_give_a_readable_message(app, overrides, message):
    seed = overrides.pop("seed", "0")
    images, table, heatmaps, status = call(app, seed=seed, **overrides)
    assert message in status and images == []


@pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("chromedriver") is None,
                    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
def test_page_in_headless_chromium(app):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1300",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(app)
        wait = WebDriverWait(driver, 60)
        button = wait.until(EC.element_to_be_clickable((By.XPATH, "//button[contains(., 'Generate')]")))
        button.click()
        wait.until(lambda d: "Done" in d.find_element(By.ID, "status").text)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#images img")) >= 4)
        assert "mc-sjd" in driver.find_element(By.ID, "stats").text
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "demo.png"))
        # an invalid setting shows a message in the page instead of failing
        seed_box = driver.find_element(By.CSS_SELECTOR, "#seed textarea, #seed input")
        seed_box.clear()
        seed_box.send_keys("not a number")
        button.click()
        wait.until(lambda d: "seed must be a whole number" in d.find_element(By.ID, "status").text)
    finally:
        driver.quit()
