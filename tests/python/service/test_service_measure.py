"""Measuring a dataset under a base model's tokenizer: trainerd runs the real `trainer-job analyze`."""


def test_measure_a_dataset_under_the_base_models_tokenizer(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    m = d.ok(d.post("/v1/datasets/train/measure", {"baseModel": "tiny/qwen3", "maxSeqLength": 16}), 200)
    assert m["rows"] == 8 and m["maxTokens"] >= m["minTokens"] > 0
    assert m["rowsOverMaxSeqLength"] > 0
