"""trainerd's options, info, and the OpenAPI file kept in step with the routes it serves."""
import re
import subprocess

import yaml

from service_helpers import BUILD, REPO


def test_help_documents_every_option():
    out = subprocess.run([str(BUILD / "apps" / "trainerd"), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for option in ("--data-dir DIR", "--port N", "--config FILE", "--host ADDR", "--instance NAME",
                   "--job-binary PATH", "--port-file FILE", "--version", "--help"):
        assert option in out.stdout, option
    assert "9001" in out.stdout and "trainer-data" in out.stdout


def test_an_unknown_option_is_refused_by_name():
    out = subprocess.run([str(BUILD / "apps" / "trainerd"), "--prot", "1"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2 and "unknown option '--prot'" in out.stderr


def test_info_reports_backend_build_configuration_and_startup(start_trainerd):
    d = start_trainerd()
    info = d.ok(d.get("/v1/info"), 200)
    assert info["backend"] == "local"
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["build"]["version"])
    assert info["configuration"]["pools"][0]["accelerator"] == "cpu"
    assert info["startup"]["ready"] is True
    names = [s["name"] for s in info["startup"]["steps"]]
    assert names == ["open store", "load configuration", "check base model folders",
                     "resume base model preparation", "recover runs", "recover evaluations", "resume registrations",
                     "resume comparisons", "read capacity", "start run driver"]
    assert all(s["ok"] for s in info["startup"]["steps"])
    # One trainerd on SQLite: the replica that answers is the only one listed, under its fixed name.
    assert info["replica"] == "trainerd"
    assert [(r["name"], r["instance"]) for r in info["replicas"]] == [("trainerd", info["instance"])]
    assert len(info["phases"]) == 16
    kinds = {k["kind"]: k for k in info["taskKinds"]}
    assert [p["name"] for p in kinds["run"]["phases"]] == info["phases"]


def test_every_openapi_route_is_served(start_trainerd, setup_basics):
    d = start_trainerd()
    setup_basics(d)
    spec = yaml.safe_load((REPO / "docs" / "openapi.yaml").read_text())
    for path, item in spec["paths"].items():
        concrete = re.sub(r"\{which\}", "base", path)
        concrete = re.sub(r"\{[^}]+\}", "0000", concrete)
        for method in ("get", "post", "put", "patch"):
            if method not in item:
                continue
            r = d.request(method.upper(), concrete, {} if method != "get" else None)
            body = r.json or {}
            assert not (r.status == 404 and "no route" in body.get("error", {}).get("message", "")), \
                (method, path, r)


def test_a_base_model_folder_missing_at_startup_is_a_failed_step(start_trainerd, tiny_model, tmp_path):
    d = start_trainerd(base_models=[{"name": "tiny/qwen3", "path": str(tiny_model)},
                                    {"name": "gone", "path": str(tmp_path / "no-such-model")}])
    info = d.ok(d.get("/v1/info"), 200)
    step = next(s for s in info["startup"]["steps"] if s["name"] == "check base model folders")
    assert step["ok"] is False
    assert f"gone: {tmp_path / 'no-such-model'}" in step["message"], step
    # The other base model still works.
    d.select_ready("tiny/qwen3")
