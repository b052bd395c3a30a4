"""`trainer runs start --dry-run` refuses a plan whose maxSeqLength leaves the bundled dataset's
rows nothing to train (issue 14), naming the plan's line, and warns about rows it would cut."""
from cli_support import plan_text


def test_a_max_seq_length_of_30_on_the_bundled_dataset_fails_the_dry_run(ready, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text().replace("maxSeqLength: 128", "maxSeqLength: 30"))
    out = ready("runs", "start", "-f", plan, "--dry-run")
    assert out.returncode == 1, out
    assert "Plan is valid" not in out.stdout
    line = out.stderr
    assert line.startswith(f"trainer: {plan}:9:3: config.maxSeqLength: 30 tokens leaves all 240 rows"), line
    assert "nothing to train" in line and "raise config.maxSeqLength to at least" in line, line
    # A real start is refused the same way, before anything is spent.
    out = ready("runs", "start", "-f", plan, "--force")
    assert out.returncode == 1 and "config.maxSeqLength" in out.stderr, out
    assert ready.json("runs", "list")["total"] == 0


def test_rows_cut_by_max_seq_length_are_warned_about_on_a_valid_dry_run(ready, tmp_path):
    m = ready.json("datasets", "measure", "sentiment-train", "--base-model", "tiny-qwen3",
                   "--max-seq-length", "512")
    length = m["minTokens"]
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text().replace("maxSeqLength: 128", f"maxSeqLength: {length}"))
    out = ready("runs", "start", "-f", plan, "--dry-run")
    assert out.returncode == 0, out
    assert "Plan is valid" in out.stdout
    assert f"Warning: config.maxSeqLength: " in out.stderr and f"longer than {length} tokens and would be cut" \
        in out.stderr, out.stderr
