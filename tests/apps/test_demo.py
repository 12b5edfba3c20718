"""The Gradio demo, driven through its API (gradio_client) and in a real headless Chromium;
`mmspec demo --pipeline` on a saved pipeline of every family."""

import os
import re
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
from mmspec.apps.demo import launch
from mmspec.apps.method_picker import MAX_METHODS
from mmspec.pipelines.emu3 import Emu3Pipeline
from mmspec.pipelines.janus import JanusPipeline
from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline
from tests.helpers.demo import client, free_port
from tests.helpers.lumina import fixture_model, tiny_tokenizer, tiny_vqgan
from tests.helpers.pipelines import tiny_c2i_pipeline
from tests.helpers.tiny_models import EMU3_SIZE, tiny_emu3, tiny_janus

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "outputs" / "screenshots"
PARAMETERS = ["condition", "methods", "seed", "guidance_scale", "temperature", "top_k", "top_p", "zipar_window",
              "lantern_k", "lantern_delta", "gsd_rank_window", "gsd_prob_gap", "gsd_embed_dist"]
RETURNS = ["images", "stats", "heatmaps", "same tokens as AR", "status"]


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
    assert endpoint["parameters"][1]["python_type"]["type"] == "list[str]"  # any composed method, not only the listed ones
    assert endpoint["parameters"][2]["python_type"]["type"] == "int"  # the seed was a str


def test_generate_round_trip_returns_images_and_stats(app):
    images, stats, heatmaps, same, status = call(app, seed=0)
    rows = stats["data"]
    assert [r[0] for r in rows] == ["ar", "sjd", "mc-sjd"]
    assert rows[0][2] == 16 and all(1 <= r[2] <= 16 for r in rows)  # forward passes
    assert all(r[1] == "yes" for r in rows)
    assert len(images) == 3 and len(heatmaps) == 3
    assert status.startswith("Done") and status.endswith(", on cpu in float32.")  # where the decodes ran


def test_the_line_under_the_images_says_which_methods_gave_ar_tokens(app):
    """Under the keyed default, auto and keyed give AR's very tokens for a seed; MC-SJD and a
    relaxed ZipAR method sample others. The line is computed from the tokens, so it agrees
    with the table's last column, and counts the tokens that differ."""
    methods = ["auto", "keyed, window 4", "mc-sjd", "zipar+mc-sjd+gsd"]
    *_, stats, _, same, status = call(app, methods=methods, seed=3)
    rows = stats["data"]
    identical = [r[0] for r in rows[1:] if r[-1] == "yes"]
    assert identical[:2] == ["auto", "keyed, window 4"] and status.startswith("Done")
    assert same.startswith(f"**Token-identical to AR:** {', '.join(f'`{name}`' for name in identical)}.")
    for name in [r[0] for r in rows[1:] if r[-1] == "no"]:
        assert re.search(rf"`{re.escape(name)}` \(\d+ of 16 tokens differ\)", same), same


def test_two_requests_at_once_get_their_own_results(app):
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda m: call(app, methods=m), [["sjd"], ["zipar+mc-sjd"]])
    assert [r[0] for r in a[1]["data"]] == ["ar", "sjd"]
    assert [r[0] for r in b[1]["data"]] == ["ar", "zipar+mc-sjd"]


@pytest.mark.parametrize(
    "settings,message",
    [
        (dict(methods=["zipar+sjd, window 0"]), "window must be a whole number from 1 to 16, got 0"),
        (dict(methods=["sjd, window 17"]), "window must be a whole number from 1 to 16, got 17"),
        (dict(methods=["auto, branches 9"]), "branches must be a whole number from 0 to 8, got 9"),
        (dict(methods=["mc-sjd, windows 4"]), "unknown setting 'windows 4' in 'mc-sjd, windows 4'"),
        (dict(methods=["keyed+gsd"]), "keyed+gsd: keyed tests each draft for equality with AR's token"),
        (dict(methods=["ar"]), "ar is decoded first already, as the baseline"),
        (dict(top_k=-5), "top_k must be a whole number >= 0"),
        (dict(zipar_window=5), "zipar_window 5 is longer than a 4-token row"),
        (dict(methods=["sjd", "sjd"]), "methods lists a method twice"),
        (dict(methods=["sjd", "mc-sjd", "zipar", "sjd+gsd", "mc-sjd+gsd"]), f"compare at most {MAX_METHODS} methods"),
        (dict(gsd_rank_window=10**9), "gsd_rank_window must be a whole number from 1 to 256"),
        (dict(lantern_k=0), "lantern_k must be a whole number from 1 to 1000"),
    ],
)
def test_invalid_settings_are_refused_in_the_page(app, settings, message):
    images, stats, heatmaps, same, status = call(app, **{"methods": ["zipar+sjd"], **settings})
    assert message in status and images == [] and same == ""


@pytest.mark.parametrize("seed", ["0", "abc", 2**64, -1, 2.5, None])
def test_a_seed_that_is_not_a_whole_number_in_range_is_refused_in_one_line(app, seed):
    """The seed was a str field: "0" ran and "abc" was parsed by hand. It is a number now, and
    anything but a whole number from 0 to 2**63 - 1 is refused before any work."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=r"^seed must be a whole number from 0 to 9223372036854775807, got"):
        call(app, seed=seed)


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
    heavy = dict(condition="square", methods=["sjd, window 100000", "mc-sjd", "zipar+mc-sjd", "mc-sjd+gsd"])
    too_many = dict(condition="circle", methods=["sjd", "mc-sjd", "zipar+mc-sjd", "mc-sjd+gsd", "sjd+lantern"])
    started = time.time()
    jobs = [c.submit(**heavy, api_name="/generate"), c.submit(**too_many, api_name="/generate")]
    normal = c.submit(condition="stripes", methods=["mc-sjd"], api_name="/generate")
    assert normal.result(timeout=60)[-1].startswith("Done") and time.time() - started < 60
    assert "window must be a whole number from 1 to 16" in jobs[0].result(timeout=60)[-1]
    assert f"compare at most {MAX_METHODS} methods" in jobs[1].result(timeout=60)[-1]


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
        methods = ["mc-sjd, window 4", "zipar+mc-sjd, window 4"]
        images, stats, heatmaps, _, status = c.predict(condition=condition, methods=methods, zipar_window=2,
                                                       api_name="/generate")
        assert status.startswith("Done"), status
        assert [r[0] for r in stats["data"]] == ["ar", *methods] and len(images) == len(heatmaps) == 3
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        log = server.communicate(timeout=60)[0].decode()
    assert "Traceback" not in log, log[-3000:]


def drive_the_picker(url: str, screenshot: Path) -> None:
    """In headless Chromium: compose a method with the picker (an invalid combination first),
    add it, generate, read the token-identical line, save a screenshot; then a bad seed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1500",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    text = lambda elem_id: driver.find_element(By.ID, elem_id).text
    choose = lambda elem_id, label: driver.find_element(By.XPATH, f"//*[@id='{elem_id}']//label[normalize-space(.)='{label}']").click()
    try:
        driver.get(url)
        wait = WebDriverWait(driver, 120)
        generate = wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space(.)='Generate']")))
        # auto (the default drafting) chooses the window and branches: the empty fields say so
        window = driver.find_element(By.CSS_SELECTOR, "#window input")
        assert window.get_attribute("placeholder") == "auto chooses" and window.get_attribute("value") == ""
        # keyed with a relaxed rule is no method: the page says which choice to change
        choose("drafting", "keyed")
        wait.until(lambda d: window.get_attribute("placeholder") == "16")
        choose("acceptance", "LANTERN")
        wait.until(lambda d: "keyed tests each draft for equality with AR's token" in text("picker-note"))
        choose("acceptance", "exact")
        add = driver.find_element(By.ID, "add")
        wait.until(lambda d: add.text == "Add keyed")
        add.click()
        wait.until(lambda d: "Added keyed." in text("picker-note"))
        assert "keyed" in text("methods").split("\n")
        generate.click()
        wait.until(lambda d: "Done" in text("status"))
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#images img")) >= 5)
        # the names are code spans, which the driver's text puts on lines of their own
        assert "Token-identicaltoAR:auto,keyed.OthertokensthanAR:mc-sjd(" in re.sub(r"\s", "", text("same-tokens"))
        assert "mc-sjd" in text("stats")
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.execute_script("window.scrollTo(0, 0)")
        driver.set_window_size(1400, driver.execute_script("return document.body.scrollHeight") + 140)  # the whole page
        driver.save_screenshot(str(screenshot))
        # a seed out of range is refused in one line, before any work
        seed_box = driver.find_element(By.CSS_SELECTOR, "#seed input")
        seed_box.clear()
        seed_box.send_keys("-1")
        generate.click()
        wait.until(lambda d: "seed must be a whole number" in d.find_element(By.TAG_NAME, "body").text)
    finally:
        driver.quit()


NO_CHROMIUM = shutil.which("chromium") is None or shutil.which("chromedriver") is None


@pytest.mark.slow
@pytest.mark.skipif(NO_CHROMIUM, reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
def test_page_in_headless_chromium(app):
    drive_the_picker(app, SCREENSHOTS / "demo.png")


@pytest.mark.slow
@pytest.mark.skipif(NO_CHROMIUM or not os.environ.get("MMSPEC_DOCS_SCREENSHOT"),
                    reason="rewrites docs/demo.png on the shipped model: set MMSPEC_DOCS_SCREENSHOT=1 (and chromium)")
def test_docs_screenshot_on_the_shipped_model():
    from mmspec.assets import DEFAULT_ASSETS
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline(DEFAULT_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    port = free_port()
    demo = launch(pipe, port=port, block=False)
    try:
        drive_the_picker(f"http://127.0.0.1:{port}/", REPO / "docs" / "demo.png")
    finally:
        demo.close()


def test_learned_drafts_are_offered_beside_the_others_and_keep_ar_tokens():
    from mmspec.apps.demo import check_settings, compare
    from mmspec.apps.method_picker import LEARNED_HEAD, first_draft_choices
    from mmspec.models.networks.draft_head import DraftHead

    pipe = tiny_c2i_pipeline(n_layer=2)
    assert LEARNED_HEAD not in first_draft_choices(pipe)
    pipe.drafter = DraftHead.for_target(pipe.transformer)
    assert LEARNED_HEAD in first_draft_choices(pipe)
    settings = check_settings(pipe, 3, 3.0, 1.0, 0, 1.0, 2, 10, 0.1, 7, 0.15, 0.5)
    _, rows, _, same = compare(pipe, {"class_labels": [0]}, ["keyed, window 8, learned drafts", "keyed, window 8"], settings)
    assert [r[0] for r in rows] == ["ar", "keyed, window 8, learned drafts", "keyed, window 8"]
    assert all(r[-1] == "yes" for r in rows)  # the same tokens as AR
    assert same == "**Token-identical to AR:** `keyed, window 8, learned drafts`, `keyed, window 8`."
