"""The viewer as a user sees it: ``canonqnn view`` serving Model Explorer on localhost, loaded in
headless Chromium (Debian's, driven by Playwright): the graph, a float island's reason, the
parity overlay with the first diverging layer; an export loaded by Model Explorer alone; and the
adapter in Model Explorer's own server.

Marked ``browser`` (``pytest -m browser``): Chromium comes from Debian (``apt-get install
chromium``); without it these tests skip, unless ``CANONQNN_REQUIRE_BROWSER`` is set, as CI
sets it (.ci/run), where they fail. Screenshots go to ``$CANONQNN_ARTIFACTS`` (default: the
test's temporary folder); ``CANONQNN_ARTIFACTS=docs/images`` remakes the README's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

import _real_models as real
from _onnx_chains import attention_scores, extreme_inputs
from _servers import STARTUP_SECONDS, Served
from canonqnn.api import convert
from canonqnn.frontends.onnx import runtime as onnx_runtime

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
REQUIRE_ENV = "CANONQNN_REQUIRE_BROWSER"
ARTIFACTS_ENV = "CANONQNN_ARTIFACTS"
# As root, without a sandbox; no connection beyond localhost is tried (this network is closed)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PAGE_MS = 120_000
VIEWPORT = {"width": 1400, "height": 1000}


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{CHROMIUM} is missing and {REQUIRE_ENV} is set: "
                        "apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    where = Path(os.environ.get(ARTIFACTS_ENV) or tmp_path_factory.mktemp("screenshots"))
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> Path:
    model = real.quantized_yolo()
    path = tmp_path_factory.mktemp("detector") / "detector.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def view(model: Path, *options: str) -> Served:
    argv = [sys.executable, "-m", "canonqnn.cli", "view", str(model), "--json", "--no-browser",
            "--port", str(free_port()), *options]
    return Served(argv, model.parent, '"url"')


def open_page(browser, url: str, graph: str = "canonical (by layer)"):
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url)
    page.get_by_text(graph).first.wait_for(timeout=PAGE_MS)
    return page


def select(page, node_id: str) -> str:
    """Select a node as Model Explorer's host page would (its postMessage command); the side
    panel's text then."""
    page.evaluate("id => window.postMessage({cmd: 'model-explorer-select-node-by-node-id', "
                  "nodeId: id}, '*')", node_id)
    page.get_by_text(node_id, exact=True).filter(visible=True).first.wait_for(timeout=PAGE_MS)
    return page.inner_text("body")


def node_data_shown(panel: str) -> list[str]:
    """The side panel's node data section: each provider's name, then the selected node's
    value."""
    section = panel.split("NODE DATA PROVIDERS", 1)[1].split("INPUTS", 1)[0]
    icons = {"expand_more"}  # (the next section's toggle, a ligature of Material icons)
    return [line.strip() for line in section.splitlines() if line.strip() not in {"", *icons}]


def expand_all_and_fit(page) -> None:
    page.get_by_text("unfold_more_double").first.click()  # "Expand all layers in the graph"
    fit(page)


def fit(page) -> None:
    page.get_by_text("fit_screen").first.click()  # "Zoom to fit"
    page.mouse.move(1, VIEWPORT["height"] // 2)  # (its tooltip hidden again)
    page.wait_for_timeout(1500)  # the layout's animation


def test_the_page_shows_the_graph_its_float_islands_reasons_and_the_parity_overlay(
        browser, detector, artifacts):
    served = view(detector, "--parity")
    shown = json.loads(served.line)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(shown["url"]).query)
    folder = Path(json.loads(query["data"][0])["models"][0]["url"]).parent
    try:
        assert (folder / "graph.json").is_file()  # what the page loads: an export's file
        page = open_page(browser, shown["url"])
        text = page.inner_text("body")
        assert "detector.onnx" in text and "25 nodes" in text
        page.get_by_text("parity: differing values").first.wait_for(timeout=PAGE_MS)
        expand_all_and_fit(page)
        island = next(i for i in shown["parity"]["float_islands"] if i["op"] == "relax.exp")
        panel = select(page, island["var"])
        assert "float island 1" in panel and island["reason"] in panel
        for expander in page.get_by_text("unfold_more", exact=True).filter(visible=True).all():
            expander.click()  # an attribute's whole value, the island's reason among them
        fit(page)
        page.screenshot(path=artifacts / "view-detector.png")
        # every canonical op's tensor is onnxruntime's here: 0 values differ on each
        conv = next(layer for layer in shown["parity"]["layers"] if layer["op"] == "conv2d")
        panel = select(page, conv["var"])
        assert node_data_shown(panel) == ["parity: differing values", "0",
                                          "parity: max |diff| (LSB)", "0"]
        assert "0 of 2048" in panel and "0 LSB" in panel  # (its attributes)
    finally:
        status = served.stop()
    assert status == 0 and not folder.exists()  # stopped on SIGTERM, its files removed


def test_the_first_diverging_layer_is_outlined_with_its_differences(browser, tmp_path,
                                                                    artifacts):
    # Converted for the other x86 class than this host's onnxruntime: the matmul differs.
    other = {"x86-avx2": "onnxruntime-1.31-x86-vnni", "x86-vnni": "onnxruntime-1.31-x86-avx2"}
    model = tmp_path / "scores.onnx"
    model.write_bytes(attention_scores(np.uint8, np.int8).SerializeToString())
    np.savez(tmp_path / "extreme.npz", **extreme_inputs(np.uint8, np.int8, 1))
    served = view(model, "--parity", "--input", "extreme.npz",
                  "--numerics", other[onnx_runtime.profile().host])
    shown = json.loads(served.line)
    try:
        found = shown["parity"]["first_divergence"]
        assert found["op"] == "matmul"
        page = open_page(browser, shown["url"])
        page.get_by_text("parity: max |diff| (LSB)").first.wait_for(timeout=PAGE_MS)
        panel = select(page, found["var"])
        assert "parity: first diverging layer" in panel
        assert f"{found['reference_vs_runtime']} of {found['elements']}" in panel
        layer = next(v for v in shown["parity"]["layers"] if v["var"] == found["var"])
        assert node_data_shown(panel) == [
            "parity: differing values", str(layer["differing"]),
            "parity: max |diff| (LSB)", str(layer["max_lsb"])]
        page.screenshot(path=artifacts / "view-first-diverging-layer.png")
    finally:
        served.stop()


def test_an_export_loads_in_model_explorer_without_canonqnn(browser, detector, tmp_path,
                                                           artifacts):
    # (run away from the source tree, whose canonqnn/ would shadow the installed package)
    done = subprocess.run([sys.executable, "-m", "canonqnn.cli", "view", str(detector),
                           "--parity", "--export", str(tmp_path / "graph.json")],
                          cwd=tmp_path, capture_output=True, text=True,
                          timeout=STARTUP_SECONDS)
    assert done.returncode == 0, done.stderr
    node_data = sorted(str(p) for p in tmp_path.glob("graph.parity-*.json"))
    assert len(node_data) == 2
    explorer = shutil.which("model-explorer", path=os.path.dirname(sys.executable))
    assert explorer, "Model Explorer's command (the view extra) is not installed"
    port = free_port()
    served = Served([explorer, str(tmp_path / "graph.json"), "--node_data_paths",
                     ",".join(node_data), "--no_open_in_browser", "--port", str(port),
                     "--host", "localhost"], tmp_path, f"http://localhost:{port}")
    try:
        page = open_page(browser, served.line.strip())
        page.get_by_text("parity: differing values").first.wait_for(timeout=PAGE_MS)
        assert "detector.onnx" in page.inner_text("body")
        page.screenshot(path=artifacts / "view-export.png")
    finally:
        served.stop()


def test_the_adapter_converts_a_model_in_model_explorers_own_server(browser, detector):
    _, report = convert(detector)
    explorer = shutil.which("model-explorer", path=os.path.dirname(sys.executable))
    assert explorer
    port = free_port()
    served = Served([explorer, str(detector), "--extensions", "canonqnn.view",
                     "--no_open_in_browser", "--port", str(port), "--host", "localhost"],
                    detector.parent, f"http://localhost:{port}")
    try:
        page = open_page(browser, served.line.strip())
        assert "25 nodes" in page.inner_text("body")
        island = report.float_islands[-1]
        panel = select(page, island.var)
        assert "float island 1" in panel and island.reason in panel
    finally:
        served.stop()
