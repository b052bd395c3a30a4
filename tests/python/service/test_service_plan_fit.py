"""Plans that cannot train are refused before anything is spent (issue 14): the service measures
the plan's dataset under its base model and maxSeqLength with the real `trainer-job analyze`,
refuses a length that leaves no row anything to train, and warns when rows would be cut."""
from service_helpers import plan


def measured(d, length):
    return d.ok(d.post("/v1/datasets/train/measure", {"baseModel": "tiny/qwen3", "maxSeqLength": length}), 200)


def test_a_length_that_leaves_no_row_to_train_is_refused_on_dry_run_and_submission(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    m = measured(d, 8)
    assert m["rowsWithNothingToTrain"] == m["rows"] == 8, m
    for path in ("/v1/runs?dryRun=true", "/v1/runs"):
        r = d.post(path, plan() | {"config": plan()["config"] | {"maxSeqLength": 8}})
        assert r.status == 400, r
        err = r.json["error"]
        assert err["field"] == "config.maxSeqLength", err
        assert "all 8 rows" in err["message"] and "nothing to train" in err["message"], err
        assert f"up to {m['maxTokens']} tokens" in err["message"], err
        assert f"at least {m['maxTokens']}" in err["message"], err
    # Nothing was started.
    assert d.ok(d.get("/v1/runs"), 200)["total"] == 0


def test_rows_that_would_be_cut_are_warned_about_with_the_numbers(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    whole = measured(d, 512)
    length = whole["maxTokens"] - 1  # the longest rows lose their last token
    m = measured(d, length)
    cut = m["rowsOverMaxSeqLength"] - m["rowsWithNothingToTrain"]
    assert 0 < cut and m["rowsWithNothingToTrain"] < m["rows"], m
    body = plan() | {"config": plan()["config"] | {"maxSeqLength": length}}
    dry = d.ok(d.post("/v1/runs?dryRun=true", body), 200)
    messages = [w["message"] for w in dry["warnings"] if w["field"] == "config.maxSeqLength"]
    assert any(f"{cut} of 8 rows are longer than {length} tokens and would be cut" in w for w in messages), dry
    run = d.ok(d.post("/v1/runs", body), 201)
    assert run["warnings"] == dry["warnings"], run
    # A length that keeps every row whole says nothing.
    body = plan() | {"config": plan()["config"] | {"maxSeqLength": whole["maxTokens"]}}
    assert "warnings" not in d.ok(d.post("/v1/runs?dryRun=true", body), 200)
