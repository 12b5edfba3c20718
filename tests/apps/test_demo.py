"""The Gradio demo, driven through its API (gradio_client) and in a real headless Chromium;
`mmspec demo --pipeline` on a saved pipeline of every family."""

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("gradio", reason="the demo needs the [demo] extra")
# imported after the skip: the demo module imports gradio
from mmspec.apps.demo import MAX_METHODS, launch
from mmspec.pipelines.emu3 import Emu3Pipeline
from mmspec.pipelines.janus import JanusPipeline
from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline
from tests.helpers.demo import client, free_port
from tests.helpers.lumina import fixture_model, tiny_tokenizer, tiny_vqgan
from tests.helpers.pipelines import tiny_c2i_pipeline
from tests.helpers.tiny_models import EMU3_SIZE, tiny_emu3, tiny_janus

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "outputs" / "screenshots"
PARAMETERS = ["condition", "methods", "seed", "window", "guidance_scale", "temperature", "top_k", "top_p", "zipar_window",
              "lantern_k", "lantern_delta", "gsd_rank_window", "gsd_prob_gap", "gsd_embed_dist"]
RETURNS = ["images", "stats", "heatmaps", "status"]


@pytest.fixture(scope="module")
def app():
    pipe = tiny_c2i_pipeline(class_names=("circle", "square", "stripes"))
    port = free_port()
    demo = launch(pipe, port=port, block=False)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def call(url, **settings):
    """/generate with the given settings by name, the page's defaults for the rest."""
    return client(url).predict(**{"condition": "square", "methods": ["sjd", "mc-sjd"], **settings}, api_name="/generate")


def test_the_api_names_its_parameters_and_outputs_for_people(app):
    """view_api() used to list parameters `lk`, `ld`, `gr_`, `gg`, `gd` and an output `value_28`."""
    api = client(app).view_api(return_format="dict", print_info=False)
    # the Images tab's /generate, then the endpoints of the tabs registered in TABS
    tabs = ["/draw_shapes", "/caption", "/generate_mesh", "/speak", "/generate_video", "/generate_lpd"]
    assert list(api["named_endpoints"]) == ["/generate", *tabs] and not api["unnamed_endpoints"]
    endpoint = api["named_endpoints"]["/generate"]
    assert [p["parameter_name"] for p in endpoint["parameters"]] == PARAMETERS
    assert [r["label"] for r in endpoint["returns"]] == RETURNS


def test_generate_round_trip_returns_images_and_stats(app):
    images, stats, heatmaps, status = call(app, seed="0")
    rows = stats["data"]
    assert [r[0] for r in rows] == ["ar", "sjd", "mc-sjd"]
    assert rows[0][2] == 16 and all(1 <= r[2] <= 16 for r in rows)  # forward passes
    assert all(r[1] == "yes" for r in rows)
    assert len(images) == 3 and len(heatmaps) == 3
    assert status.startswith("Done")


def test_two_requests_at_once_get_their_own_results(app):
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda m: call(app, methods=m), [["sjd"], ["zipar+mc-sjd"]])
    assert [r[0] for r in a[1]["data"]] == ["ar", "sjd"]
    assert [r[0] for r in b[1]["data"]] == ["ar", "zipar+mc-sjd"]


@pytest.mark.parametrize(
    "settings,message",
    [
        (dict(window=0), "window must be a whole number from 1 to 16, got 0"),
        (dict(window=17), "window must be a whole number from 1 to 16, got 17"),
        (dict(seed="abc"), "seed must be a whole number"),
        (dict(seed=str(2**64)), "seed must be a whole number from 0 to 9223372036854775807"),
        (dict(top_k=-5), "top_k must be a whole number >= 0"),
        (dict(zipar_window=5), "zipar_window 5 is longer than a 4-token row"),
        (dict(methods=["sjd", "sjd"]), "methods lists a method twice"),
        (dict(methods=["sjd", "mc-sjd", "zipar", "sjd+gsd", "mc-sjd+gsd"]), f"compare at most {MAX_METHODS} methods"),
        (dict(gsd_rank_window=10**9), "gsd_rank_window must be a whole number from 1 to 256"),
        (dict(lantern_k=0), "lantern_k must be a whole number from 1 to 1000"),
    ],
)
def test_invalid_settings_are_refused_in_the_page(app, settings, message):
    images, stats, heatmaps, status = call(app, **{"methods": ["zipar+sjd"], **settings})
    assert message in status and images == []


@pytest.mark.parametrize("settings", [dict(guidance_scale=1e30), dict(lantern_delta=2.0), dict(top_p=0)])
def test_a_slider_refuses_values_outside_its_range(app, settings):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="(greater|less) than (maximum|minimum) value"):
        call(app, **settings)


def test_two_pathological_requests_do_not_starve_a_normal_one(app):
    """Two requests with `window=100000` used to hold both workers while a normal request
    waited in the queue for more than a minute. Now a request is bounded before any work
    (window, number of methods) and the queue runs two at a time."""
    c = client(app)
    heavy = dict(condition="square", window=100000, methods=["sjd", "mc-sjd", "zipar+mc-sjd", "mc-sjd+gsd"])
    too_many = dict(condition="circle", methods=["sjd", "mc-sjd", "zipar+mc-sjd", "mc-sjd+gsd", "sjd+lantern"])
    started = time.time()
    jobs = [c.submit(**heavy, api_name="/generate"), c.submit(**too_many, api_name="/generate")]
    normal = c.submit(condition="stripes", methods=["mc-sjd"], api_name="/generate")
    assert normal.result(timeout=60)[3].startswith("Done") and time.time() - started < 60
    assert "window must be a whole number from 1 to 16" in jobs[0].result(timeout=60)[3]
    assert f"compare at most {MAX_METHODS} methods" in jobs[1].result(timeout=60)[3]


# --- `mmspec demo --pipeline` on a saved pipeline of each family -------------------------


def saved_llamagen(root: Path) -> str:
    tiny_c2i_pipeline(class_names=("circle", "square", "stripes")).save_pretrained(root)
    return "square"


def saved_emu3(root: Path) -> str:
    Emu3Pipeline(*tiny_emu3(), **EMU3_SIZE).save_pretrained(root)
    return "a red cat"


def saved_janus(root: Path) -> str:
    JanusPipeline(*tiny_janus()).save_pretrained(root)
    return "a blue dog"


def saved_lumina(root: Path) -> str:
    LuminaMGPTPipeline(fixture_model(), tiny_tokenizer(), tiny_vqgan(), height=64, width=64).save_pretrained(root)
    return "a red cat"


@pytest.mark.slow
@pytest.mark.parametrize("save", [saved_llamagen, saved_emu3, saved_janus, saved_lumina],
                         ids=["llamagen", "emu3", "janus", "lumina-mgpt"])
def test_mmspec_demo_serves_a_saved_pipeline_of_every_family(tmp_path, save):
    """The demo used to read `pipe.transformer.config`, so an Emu3 or Janus pipeline failed."""
    condition = save(tmp_path / "pipe")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    server = subprocess.Popen([sys.executable, "-m", "mmspec.commands.cli", "demo", "--pipeline", str(tmp_path / "pipe"), "--port", str(port)],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        c = client(f"http://127.0.0.1:{port}/", timeout=180)
        images, stats, heatmaps, status = c.predict(condition=condition, methods=["mc-sjd", "zipar+mc-sjd"], window=4,
                                                    zipar_window=2, api_name="/generate")
        assert status.startswith("Done"), status
        assert [r[0] for r in stats["data"]] == ["ar", "mc-sjd", "zipar+mc-sjd"] and len(images) == len(heatmaps) == 3
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        log = server.communicate(timeout=60)[0].decode()
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.slow
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


def test_learned_drafts_are_offered_beside_the_others_and_keep_ar_tokens():
    from mmspec.apps.demo import LEARNED, check_settings, compare, methods_for
    from mmspec.models.networks.draft_head import DraftHead

    pipe = tiny_c2i_pipeline(n_layer=2)
    assert "auto" + LEARNED not in methods_for(pipe)
    pipe.drafter = DraftHead.for_target(pipe.transformer)
    assert "auto" + LEARNED in methods_for(pipe)
    settings = check_settings(pipe, "3", 8, 3.0, 1.0, 0, 1.0, 2, 10, 0.1, 7, 0.15, 0.5)
    _, rows, _ = compare(pipe, {"class_labels": [0]}, ["keyed" + LEARNED, "keyed"], settings)
    assert [r[0] for r in rows] == ["ar", "keyed" + LEARNED, "keyed"]
    assert all(r[-1] == "yes" for r in rows)  # the same tokens as AR
