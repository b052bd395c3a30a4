"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, for the dashboard's
test: one page to navigate, evaluate script in, wait on and screenshot, with every page error
collected (uncaught exceptions, console.error, and the browser's own error log entries such as a
failed request).

The protocol is JSON over a WebSocket (websocket-client, pinned in requirements/python.txt). The
browser listens on a port it picks itself (--remote-debugging-port=0) and names it in its
profile's DevToolsActivePort file."""
from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
import urllib.request

import websocket

from waiting import wait_for

BINARY = shutil.which("chromium") or "/usr/bin/chromium"
WINDOW = (1400, 1100)  # pixels: room for a run page's charts side by side


class Chromium:
    """One headless browser with one page. Every process started here is stopped by close()."""

    def __init__(self, profile: pathlib.Path, timeout: float = 60.0):
        profile.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self.errors: list[str] = []   # what went wrong on the page, in words, oldest first
        self.requests: list[str] = []  # the URLs the page asked for, oldest first
        self._next_id = 0
        self._log = open(profile / "chromium.log", "wb")
        self.proc = subprocess.Popen(
            [BINARY, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "about:blank"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = profile / "DevToolsActivePort"
            wait_for(lambda: self._check_alive() and port_file.exists() and port_file.read_text().count("\n") >= 1,
                     timeout=timeout, what="chromium's DevToolsActivePort")
            port = int(port_file.read_text().splitlines()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                page = next(t for t in json.load(r) if t["type"] == "page")
            # No Origin header: the browser refuses WebSocket clients from other origins.
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout,
                                                  suppress_origin=True)
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def set_cookie(self, url: str, name: str, value: str) -> None:
        """Gives the browser the cookie `name` for `url`'s site (the dashboard's API token)."""
        result = self.send("Network.setCookie", name=name, value=value, url=url, sameSite="Strict")
        assert result.get("success", True), result

    def clear_cookies(self) -> None:
        self.send("Network.clearBrowserCookies")

    def _check_alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"chromium exited {self.proc.returncode}; see {self._log.name}")
        return True

    def send(self, method: str, **params) -> dict:
        """Sends one command and returns its result, noting the events that arrive meanwhile."""
        self._next_id += 1
        call_id = self._next_id
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._note(message)
        raise AssertionError(f"{method}: no answer within {self.timeout:.0f}s")

    def _note(self, event: dict) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append(f"uncaught: {text} at {details.get('url', '')}:{details.get('lineNumber')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.errors.append(f"console.error: {args}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".rstrip())
        elif method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])

    def evaluate(self, expression: str):
        """The value of `expression` in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        """Opens `url` and waits until its document has loaded."""
        self.send("Page.navigate", url=url)
        wait_for(lambda: self.evaluate(f"location.href === {json.dumps(url)} && document.readyState === 'complete'"),
                 timeout=self.timeout, what=f"{url} to load")

    def wait_for(self, expression: str, what: str, timeout: float | None = None):
        """Waits until `expression` is truthy in the page; returns its value."""
        return wait_for(lambda: self.evaluate(expression), timeout=timeout or self.timeout, what=what)

    def screenshot(self, path: pathlib.Path) -> pathlib.Path:
        """The whole page as a PNG at `path`."""
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def take_errors(self) -> list[str]:
        """The errors noted so far (the events already sent are read first); clears them."""
        self.evaluate("0")
        errors, self.errors = self.errors, []
        return errors

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
