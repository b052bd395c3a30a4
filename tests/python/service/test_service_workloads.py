"""Workloads: immutable id, rename, evaluation dataset and grader, refs, GPU quota; base models."""
import time

from service_helpers import CHAT_ROWS, jsonl, plan


def test_rename_keeps_the_id_and_frees_the_old_name(start_trainerd, setup_basics):
    d = start_trainerd()
    w, _ = setup_basics(d)
    assert w["evaluation"] == {"dataset": None, "grader": "json-label-match"}
    assert w["refs"] == {"base": None, "candidate": None, "champion": None}
    run = d.ok(d.post("/v1/runs", plan()), 201)
    renamed = d.ok(d.request("PATCH", "/v1/workloads/triage", {"name": "support-triage", "description": "tickets"}), 200)
    assert renamed["id"] == w["id"] and renamed["name"] == "support-triage"
    assert [h["change"] for h in renamed["history"]][-2:] == ["renamed from 'triage' to 'support-triage'",
                                                              "description: tickets"]
    assert d.run(run["runId"])["workload"] == {"id": w["id"], "name": "support-triage"}
    assert d.ok(d.get("/v1/runs"), 200)["runs"][0]["workload"]["name"] == "support-triage"
    assert d.ok(d.get(f"/v1/runs?workload={w['id']}"), 200)["total"] == 1
    assert d.ok(d.get("/v1/runs?workload=support-triage"), 200)["total"] == 1
    again = d.ok(d.post("/v1/workloads", {"name": "triage"}), 201)  # the old name is free
    assert again["id"] != w["id"]
    taken = d.request("PATCH", "/v1/workloads/triage", {"name": "support-triage"})
    assert taken.status == 409 and taken.json["error"]["field"] == "name"
    assert d.ok(d.get(f"/v1/workloads/{w['id'][:6]}"), 200)["name"] == "support-triage"


def test_evaluation_refs_and_grader(start_trainerd, setup_basics):
    d = start_trainerd()
    _, ds = setup_basics(d)
    ev = d.ok(d.request("PUT", "/v1/workloads/triage/evaluation", {"dataset": "train"}), 200)
    since = ev["evaluation"].pop("since")  # when this setting began (its score table's start)
    assert ev["evaluation"] == {"dataset": ds["hash"], "grader": "json-label-match"} and since == ev["updatedAt"]
    bad = d.request("PUT", "/v1/workloads/triage/evaluation", {"dataset": "train", "grader": "vibes"})
    assert bad.status == 400 and bad.json["error"]["field"] == "grader"
    base = d.ok(d.request("PUT", "/v1/workloads/triage/refs/base", {"target": "tiny/qwen3"}), 200)
    assert base["target"]["kind"] == "baseModel" and base["target"]["name"] == "tiny/qwen3"
    # With a base ref the plan may omit baseModel.
    p = plan()
    del p["baseModel"]
    run = d.ok(d.post("/v1/runs", p), 201)
    assert run["baseModel"] == "tiny/qwen3"
    early = d.request("PUT", "/v1/workloads/triage/refs/candidate", {"target": run["runId"]})
    assert early.status == 409 and "only a completed run" in early.json["error"]["message"]
    done = d.wait_phase(run["runId"], "COMPLETED")
    # The completed run registered its adapter (without a catalog: the job's adapter folder).
    deadline = time.time() + 60
    while d.ok(d.get(f"/v1/trained-models/{done['modelId']}"), 200)["status"] != "REGISTERED":
        assert time.time() < deadline
        time.sleep(0.1)
    cand = d.ok(d.request("PUT", "/v1/workloads/triage/refs/candidate", {"target": run["runId"]}), 200)
    assert cand["target"]["runId"] == run["runId"] and cand["target"]["modelId"] == done["modelId"]
    assert cand["target"]["artifact"]["uri"].endswith("registry/models/" + done["modelId"])
    assert d.ok(d.get("/v1/workloads/triage/refs/candidate"), 200)["target"] == cand["target"]
    assert d.get("/v1/workloads/triage/refs/boss").status == 400


def test_base_models_are_pinned_to_their_content_and_prepared_into_the_cache(start_trainerd, tiny_model):
    d = start_trainerd()
    listed = d.ok(d.get("/v1/base-models?all=true"), 200)["baseModels"]
    assert [(m["name"], m["status"]) for m in listed] == [("tiny/qwen3", "allowed")]
    assert d.ok(d.get("/v1/base-models"), 200)["baseModels"] == []
    ready = d.select_ready("tiny/qwen3")
    assert len(ready["contentHash"]) == 64
    cache = d.data_dir / "models" / ready["contentHash"]
    # The document names the cache by storage key, not by a folder of trainerd's host.
    assert ready["cacheKey"] == "models/" + ready["contentHash"] and "cachePath" not in ready
    assert sorted(p.name for p in cache.iterdir() if p.name != ".complete") == \
        sorted(p.name for p in tiny_model.iterdir())
    again = d.ok(d.post("/v1/base-models/select", {"name": "tiny/qwen3"}), 202)  # idempotent
    assert again["contentHash"] == ready["contentHash"]
    assert d.ok(d.get(f"/v1/base-models/{ready['id']}"), 200)["name"] == "tiny/qwen3"


def test_a_base_model_allowed_but_not_selected_is_refused_by_name(start_trainerd):
    d = start_trainerd()
    d.ok(d.post("/v1/workloads", {"name": "triage"}), 201)
    d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 201)
    r = d.post("/v1/runs", plan())
    assert r.status == 409 and r.json["error"]["field"] == "baseModel"
    assert "select it first" in r.json["error"]["message"]
