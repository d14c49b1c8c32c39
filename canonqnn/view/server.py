"""Model Explorer started on this machine on a view's files (the view extra).

The files are the ones ``View.export`` writes, in a temporary folder that lives as long as the
server: what the browser shows is exactly what an export would hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.request
import webbrowser
from collections.abc import Callable
from typing import Any

from .. import extras
from ..errors import CanonqnnError

FIRST_PORT, LAST_PORT = 8080, 8099  # where Model Explorer looks for a free port itself
STARTUP_SECONDS = 120.0  # how long the server may take to answer before nothing is announced


def serve(view: Any, *, host: str = "localhost", port: int | None = None,
          open_browser: bool = True, announce: Callable[[str], None] = print) -> None:
    """Serve ``view`` (``canonqnn.view.View``) with Model Explorer at ``host:port`` (default:
    the first free port from 8080 to 8099, else any) until interrupted (Ctrl+C, SIGTERM);
    ``announce(url)`` once the server answers (from another thread, while ``sys.stdout`` is
    the server's, pointed at stderr); ``open_browser``: open the page too, where a
    browser can be shown."""
    extras.require("view")
    import model_explorer
    from model_explorer import server

    port = _free_port(host, port)
    with tempfile.TemporaryDirectory(prefix="canonqnn-view-") as folder:
        files = view.export(os.path.join(folder, "graph.json"))
        config = model_explorer.config()
        config.add_model_from_path(files[0])
        for path in files[1:]:
            config.add_node_data_from_path(path)
        url = f"http://{host}:{port}/?data={config.to_url_param_value()}"
        threading.Thread(target=_announce_when_up, args=(f"http://{host}:{port}", url, announce),
                         daemon=True).start()
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            # Model Explorer prints its own start-up lines on stdout: they go where other
            # packages' output goes (shown with --verbose), the URL having been announced
            with contextlib.redirect_stdout(sys.stderr):
                server.start(host=host, port=port, config=config,
                             no_open_in_browser=not (open_browser and can_open_browser()))
        finally:
            signal.signal(signal.SIGTERM, previous)


def can_open_browser() -> bool:
    """Whether a browser window can be shown: on Linux, only with a display (elsewhere
    Python's ``webbrowser`` falls back to a text browser in the terminal)."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return webbrowser is not None


def _announce_when_up(server_url: str, url: str, announce: Callable[[str], None]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{server_url}/check_health", timeout=1) as answer:
                if answer.status == 200:
                    announce(url)
                    return
        except OSError:
            pass
        time.sleep(0.2)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _free_port(host: str, port: int | None) -> int:
    if port is not None:
        if _in_use(host, port):
            raise CanonqnnError(f"port {port} on {host} is in use: give another with --port")
        return port
    for candidate in range(FIRST_PORT, LAST_PORT + 1):
        if not _in_use(host, candidate):
            return candidate
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _in_use(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
