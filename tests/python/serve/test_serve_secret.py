"""`trainer-job serve` with an endpoint's secret (TRAINER_SERVE_SECRET, as trainerd starts it;
docs/security.md, "Serving processes"): every route refuses a request without the secret, or with
another, with 401 in OpenAI's error shape (the official client's AuthenticationError), and answers
with it; the secret is not on its command line. Started by hand without one (the `server` fixture
of the other serving tests) it checks nothing, and its listening line names the address it
listens on."""
import pathlib
import socket

import openai
import pytest
import requests

from serve_support import start_serve, stop_serve

SECRET = "0123456789abcdef" * 4


@pytest.fixture(scope="module")
def guarded(bin_dir, served_models):
    served = start_serve(bin_dir, served_models, "--kv-blocks", 64, env={"TRAINER_SERVE_SECRET": SECRET})
    yield served
    stop_serve(served)


@pytest.mark.parametrize("route", [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/v1/stats"),
                                   ("GET", "/health"), ("POST", "/v1/adapters"), ("DELETE", "/v1/adapters/alpha")])
@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {SECRET}", f"Bearer {SECRET}x"])
def test_a_request_without_the_secret_is_401_in_openais_shape_and_changes_nothing(guarded, route, header):
    method, path = route
    r = requests.request(method, guarded.url + path, headers={"Authorization": header} if header else {},
                         json={"model": guarded.base_name, "messages": [{"role": "user", "content": "hi"}]}, timeout=60)
    assert r.status_code == 401, (r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error", error
    assert "secret" in error["message"], error
    # Nothing was done: alpha is still attached.
    ok = requests.get(guarded.url + "/v1/adapters", headers={"Authorization": f"Bearer {SECRET}"}, timeout=60)
    assert [a["name"] for a in ok.json()["data"]] == ["alpha", "beta"], ok.text


def test_the_official_client_with_the_secret_is_answered_and_without_it_is_refused(guarded):
    good = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=SECRET, max_retries=0, timeout=120)
    answer = good.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                          temperature=0)
    assert answer.usage.completion_tokens <= 2 and answer.model == "alpha", answer
    bad = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key="wrong", max_retries=0, timeout=120)
    with pytest.raises(openai.AuthenticationError) as caught:
        bad.models.list()
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key", caught.value.body


def test_the_secret_is_not_on_the_command_line_and_the_listening_line_names_the_host(guarded):
    cmdline = pathlib.Path(f"/proc/{guarded.proc.pid}/cmdline").read_bytes()
    assert SECRET.encode() not in cmdline, cmdline
    assert guarded.hello["host"] == "127.0.0.1" and "hostname" not in guarded.hello, guarded.hello


def test_a_process_started_without_a_secret_answers_anyone(server):
    assert requests.get(server.url + "/v1/models", timeout=60).status_code == 200


def test_on_every_interface_the_listening_line_names_the_machine_too(bin_dir, served_models):
    served = start_serve(bin_dir, served_models, "--kv-blocks", 16, "--host", "0.0.0.0",
                         env={"TRAINER_SERVE_SECRET": SECRET})
    try:
        assert served.hello["host"] == "0.0.0.0" and served.hello["hostname"] == socket.gethostname(), served.hello
        assert requests.get(served.url + "/health", timeout=60).status_code == 401
        assert requests.get(served.url + "/health", headers={"Authorization": f"Bearer {SECRET}"}, timeout=60).ok
    finally:
        stop_serve(served)
