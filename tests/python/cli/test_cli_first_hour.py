"""A new user's first hour (issue 14), through the real `trainer` against a real trainerd: help
with examples, mistakes caught with the nearest valid name and the place in the file, every
"not found" or "stopped" ending with the next step, no silent surprises, clear read-outs."""
from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time

from cli_support import (DATASET_NAME, EXAMPLES, MODEL_NAME, WORKLOAD, Cli, cancel_run, free_port, kill_job_of,
                         plan_text, start_run)

LONG_RUN_STEPS = 100000
COMMANDS = [[], ["info"], ["status"], ["base-models"], ["base-models", "list"], ["base-models", "get"],
            ["base-models", "select"], ["base-models", "wait"], ["datasets"], ["datasets", "create"],
            ["datasets", "list"], ["datasets", "get"], ["datasets", "measure"], ["workloads"],
            ["workloads", "create"], ["workloads", "list"], ["workloads", "get"], ["workloads", "rename"],
            ["workloads", "annotate"], ["workloads", "set-evaluation"], ["workloads", "refs"],
            ["workloads", "refs", "get"], ["workloads", "refs", "set"], ["runs"], ["runs", "start"],
            ["runs", "list"], ["runs", "get"], ["runs", "wait"], ["runs", "cancel"], ["runs", "annotate"],
            ["runs", "metrics"], ["runs", "hparams"], ["runs", "engine-config"],
            ["runs", "engine-runtime"], ["pipelines"], ["pipelines", "start"], ["pipelines", "list"],
            ["pipelines", "get"], ["pipelines", "wait"], ["pipelines", "resume"], ["pipelines", "cancel"],
            ["pipelines", "annotate"], ["capacity"], ["help"]]


# ---- help (no service needed) ----------------------------------------------------------------

def test_every_help_page_has_examples_and_help_command_equals_dash_dash_help(bin_dir):
    cli = Cli(bin_dir / "trainer", None)
    for path in COMMANDS:
        flag = cli(*path, "--help")
        assert flag.returncode == 0, (path, flag.stderr)
        assert "\nExamples:\n  # " in flag.stdout, f"no examples in `trainer {' '.join(path)} --help`"
        via_help = cli("help", *path)
        assert via_help.returncode == 0, (path, via_help.stderr)
        assert via_help.stdout == flag.stdout, path


def test_runs_start_help_shows_a_plan_and_where_to_learn_more(bin_dir):
    out = Cli(bin_dir / "trainer", None)("help", "runs", "start")
    assert out.returncode == 0
    for text in ("kind: run", "workload: sentiment-demo", "dataset: sentiment-train", "examples/sentiment/run.yaml",
                 "--dry-run --show-resolved", "docs/plans.md",
                 "print the plan with every default filled in (needs --dry-run)",
                 "--exit-status", "(needs --wait)"):
        assert text in out.stdout, text


def test_a_flag_that_needs_another_is_refused_alone(bin_dir):
    cli = Cli(bin_dir / "trainer", None)
    out = cli("runs", "start", "-f", EXAMPLES / "sentiment" / "run.yaml", "--show-resolved")
    assert out.returncode == 2
    assert out.stderr == "trainer: --show-resolved needs --dry-run; see `trainer runs start --help`\n"


def test_a_misspelt_command_suggests_the_nearest(bin_dir):
    cli = Cli(bin_dir / "trainer", None)
    out = cli("runs", "strat", "-f", "plan.yaml")
    assert out.returncode == 2
    assert out.stderr == ("trainer: unknown command \"strat\" for `trainer runs` (did you mean `trainer runs start`?); "
                          "see `trainer runs --help`\n")
    out = cli("runs", "list", "--phse", "open")
    assert out.returncode == 2 and "(did you mean --phase?)" in out.stderr


def test_a_misspelt_plan_field_suggests_the_nearest_and_gives_line_and_column(bin_dir, tmp_path):
    cli = Cli(bin_dir / "trainer", f"http://127.0.0.1:{free_port()}")  # nothing listens: checked locally
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text().replace("optimizer: {learningRate: 0.003}",
                                        "optimizer:\n      learningRat: 0.003"))
    out = cli("runs", "start", "-f", plan, "--dry-run")
    assert out.returncode == 1
    # line 8, column 7: "      learningRat: 0.003"
    assert out.stderr == (f"trainer: {plan}:8:7: config.hyperparams.optimizer.learningRat: unknown field; "
                          "did you mean learningRate?\n"), out.stderr


# ---- against trainerd ------------------------------------------------------------------------

def test_an_unknown_workload_in_a_plan_gives_its_line_the_nearest_name_and_the_next_step(ready, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text().replace(f"workload: {WORKLOAD}", "workload: cli-test"))
    out = ready("runs", "start", "-f", plan, "--dry-run")
    assert out.returncode == 1
    line = out.stderr
    assert line.startswith(f"trainer: {plan}:2:1: workload: "), line
    assert "did you mean cli-tests?" in line, line
    assert "`trainer workloads create cli-test`" in line and "`trainer workloads list`" in line, line


def test_not_found_messages_end_with_the_next_step(ready):
    out = ready("workloads", "get", "cli-test")
    assert out.returncode == 1
    assert "did you mean cli-tests?" in out.stderr and "`trainer workloads list`" in out.stderr, out.stderr
    out = ready("runs", "get", "ffffffffffff")
    assert out.returncode == 1
    assert out.stderr.rstrip().endswith("see `trainer runs list` for the runs there are"), out.stderr
    out = ready("datasets", "get", "sentiment-trian")
    assert out.returncode == 1 and f"did you mean {DATASET_NAME}?" in out.stderr, out.stderr


def test_a_model_not_in_the_deployment_says_an_operator_adds_it(ready):
    out = ready("runs", "start", "-f", "-", "--dry-run",
                input=plan_text().replace(f"baseModel: {MODEL_NAME}", "baseModel: tiny-qwen4"))
    assert out.returncode == 1
    assert out.stderr.startswith("trainer: stdin:3:1: baseModel: "), out.stderr
    assert f"did you mean {MODEL_NAME}?" in out.stderr
    assert "under `baseModels` in `trainerd --config`" in out.stderr, out.stderr
    out = ready("base-models", "select", "tiny-qwen4")
    assert out.returncode == 1 and "`trainerd --config`" in out.stderr, out.stderr


def test_metrics_fields_refuses_a_name_no_step_carries(ready):
    run = start_run(ready, plan_text(max_steps=2))
    ready("runs", "wait", run["runId"], "--timeout", "5m", check=True)
    out = ready("runs", "metrics", run["runId"], "--fields", "bogus")
    assert out.returncode == 2
    assert out.stderr.startswith("trainer: --fields: no metric named \"bogus\""), out.stderr
    assert "loss" in out.stderr and "batchTokens" in out.stderr, out.stderr
    near = ready("runs", "metrics", run["runId"], "--fields", "batchToken")
    assert near.returncode == 2 and "did you mean batchTokens?" in near.stderr
    ok = ready("runs", "metrics", run["runId"], "--fields", "batchTokens")
    assert ok.returncode == 0 and "BATCHTOKENS" in ok.stdout
    # The engine's useful FLOPs travel through trainerd like every figure a step carries.
    useful = ready("runs", "metrics", run["runId"], "--fields", "usefulFlops")
    assert useful.returncode == 0 and "USEFULFLOPS" in useful.stdout, useful.stderr
    steps = ready.json("runs", "metrics", run["runId"])["steps"]
    assert len(steps) == 2 and all(s["usefulFlops"] > 0 for s in steps), steps


def test_metrics_of_a_failed_run_says_it_failed_and_why(ready):
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS, max_attempts=1))
    kill_job_of(run["runId"])
    ready("runs", "wait", run["runId"], "--timeout", "5m", check=True)
    out = ready("runs", "metrics", run["runId"])
    assert out.returncode == 0, out.stderr
    assert "No steps recorded yet" not in out.stdout
    assert f"run {run['runId'][:12]} FAILED before its first step: " in out.stdout, out.stdout


def test_cancelling_a_run_that_keeps_no_adapter_says_so(ready):
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    out = ready("runs", "cancel", run["runId"], "--force")
    assert out.returncode == 0, out.stderr
    assert "execution.saveEvery is unset" in out.stderr and "nothing it trained is kept" in out.stdout, out
    kept = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS, save_every=5))
    out = ready("runs", "cancel", kept["runId"], "--force")
    assert out.returncode == 0 and "saveEvery" not in out.stdout + out.stderr


def test_wait_timeout_reports_the_time_asked_for(ready):
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    try:
        out = ready("runs", "wait", run["runId"], "--timeout", "3s")
        assert out.returncode == 5
        assert "stopped waiting after 3s (--timeout)" in out.stderr, out.stderr
        short = run["runId"][:12]
        assert f"`trainer runs wait {short}`" in out.stderr and f"`trainer runs cancel {short}`" in out.stderr
    finally:
        cancel_run(ready, run["runId"], wait=False)


def test_cpu_runs_show_cpu_seconds_and_runs_get_keeps_the_record_out_of_cost(ready):
    run = start_run(ready, plan_text(max_steps=2))
    ready("runs", "wait", run["runId"], "--timeout", "5m", check=True)
    out = ready("runs", "get", run["runId"])
    assert out.returncode == 0
    assert "CPU time:" in out.stdout and "CPU-s" in out.stdout, out.stdout
    assert "GPU time" not in out.stdout and "GPU-s" not in out.stdout, out.stdout
    cost = out.stdout[out.stdout.index("Cost\n"):out.stdout.index("Record\n")]
    assert "Created:" not in cost and "Submission:" not in cost and "Settings sha:" not in cost
    record = out.stdout[out.stdout.index("Record\n"):]
    assert "Created:" in record and "Submission:" in record and "Settings sha:" in record


def test_base_models_get_shows_sections_and_what_the_deployment_admits(ready):
    out = ready("base-models", "get", MODEL_NAME)
    assert out.returncode == 0, out.stderr
    for section in ("State\n", "Weights\n", "Deployment\n"):
        assert section in out.stdout, out.stdout
    assert "Allowed:" in out.stdout and "yes" in out.stdout
    assert f"can name it now (baseModel: {MODEL_NAME})" in out.stdout, out.stdout


def on_a_terminal(cli, args, columns=120, answer: str | None = None):
    """Starts `trainer ARGS` on a pseudo-terminal of `columns`; returns (process, master fd)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TRAINER_URL")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([str(cli.binary), *map(str, args), "--trainer-url", cli.url], stdin=slave,
                            stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    if answer is not None:
        os.write(master, answer.encode() + b"\n")
    return proc, master


def read_until(master, predicate, buffer: bytearray, timeout=180.0) -> bytearray:
    deadline = time.time() + timeout
    while not predicate(bytes(buffer)):
        if time.time() > deadline:
            raise AssertionError(f"timed out; terminal shows:\n{bytes(buffer)[-2000:]!r}")
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            buffer.extend(chunk)
    return buffer


def test_the_start_confirmation_names_the_dataset_by_name_and_short_hash(ready, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text())
    dataset_hash = ready.json("datasets", "get", DATASET_NAME)["hash"]
    proc, master = on_a_terminal(ready, ["runs", "start", "-f", plan], answer="n")
    try:
        out = read_until(master, lambda b: b"not started" in b, bytearray(), timeout=60).decode(errors="replace")
        assert proc.wait(timeout=30) == 1
    finally:
        os.close(master)
    assert f"dataset {DATASET_NAME} ({dataset_hash[:12]})" in out, out
    assert dataset_hash not in out


class ReflowingTerminal:
    """The screen of a terminal that reflows wrapped lines when resized (as VTE, kitty, iTerm2,
    Windows Terminal and tmux do): logical lines, each shown as rows of `columns` cells."""

    def __init__(self, columns: int):
        self.columns = columns
        self.lines = [""]
        self.row = 0      # logical line of the cursor
        self.offset = 0   # cell within it

    def resize(self, columns: int):
        self.columns = columns

    def _row_start(self) -> int:
        line = self.lines[self.row]
        if self.offset and self.offset % self.columns == 0 and self.offset >= len(line):
            return self.offset - self.columns  # pending wrap: still on the row just filled
        return self.offset - self.offset % self.columns

    def feed(self, data: str):
        i = 0
        while i < len(data):
            c = data[i]
            if c == "\x1b":
                m = re.match(r"\x1b\[([0-9;?]*)([A-Za-z])", data[i:])
                if not m:
                    i += 1
                    continue
                i += m.end()
                if m.group(2) == "K":
                    start = self._row_start()
                    line = self.lines[self.row]
                    end = start + self.columns
                    tail = line[end:]
                    self.lines[self.row] = line[:self.offset] + (" " * (end - self.offset) + tail if tail else "")
                elif m.group(2) == "A":
                    start = self._row_start()
                    column = self.offset - start
                    if start >= self.columns:
                        self.offset = start - self.columns + column
                    elif self.row > 0:
                        self.row -= 1
                        rows = max(1, -(-len(self.lines[self.row]) // self.columns))
                        self.offset = (rows - 1) * self.columns + column
                continue  # colours and other sequences draw nothing
            i += 1
            if c == "\r":
                self.offset = self._row_start()
            elif c == "\n":
                self.row += 1
                if self.row == len(self.lines):
                    self.lines.append("")
                self.offset = 0
            elif c >= " ":
                line = self.lines[self.row].ljust(self.offset)
                self.lines[self.row] = line[:self.offset] + c + line[self.offset + 1:]
                self.offset += 1

    def screen(self) -> list[str]:
        rows = []
        for line in self.lines:
            chunks = [line[k:k + self.columns] for k in range(0, max(len(line), 1), self.columns)]
            rows += [chunk.rstrip() for chunk in chunks]
        return rows


def test_a_terminal_narrowed_mid_run_keeps_no_stale_progress_line_and_ctrl_c_says_what_next(ready):
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    short = run["runId"][:12]
    proc, master = on_a_terminal(ready, ["runs", "wait", run["runId"]], columns=120)
    try:
        # Two draws of the TRAINING line at 120 columns, then two more after narrowing to 50.
        wide = read_until(master, lambda b: b.count(b"TRAINING") >= 2, bytearray())
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 50, 0, 0))
        narrow = read_until(master, lambda b: b.count(b"TRAINING") >= 2, bytearray())
        os.killpg(proc.pid, signal.SIGINT)
        narrow = read_until(master, lambda b: b"stops it" in b, narrow, timeout=30)
        assert proc.wait(timeout=30) == 130
    finally:
        os.close(master)
        cancel_run(ready, run["runId"], wait=False)
    terminal = ReflowingTerminal(120)
    terminal.feed(wide.decode(errors="replace"))
    training_rows = [r for r in terminal.screen() if "TRAINING" in r]
    assert len(training_rows) == 1, terminal.screen()
    assert len(training_rows[0]) > 50  # so narrowing to 50 columns wraps it onto two rows
    terminal.resize(50)
    terminal.feed(narrow.decode(errors="replace"))
    screen = terminal.screen()
    progress = [r for r in screen if "TRAINING" in r]
    assert len(progress) == 1, "\n".join(screen)
    assert len(progress[0]) <= 50
    message = re.sub(r"\s+", " ", narrow.decode(errors="replace"))
    assert f"stopped watching run {short}" in message, message
    assert f"`trainer runs wait {short}` follows it again" in message, message
    assert f"`trainer runs cancel {short}` stops it" in message, message


def test_measure_says_what_to_do_when_rows_have_nothing_to_train(ready):
    out = ready("datasets", "measure", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", "8")
    assert out.returncode == 0, out.stderr
    hint = [line for line in out.stdout.splitlines() if line.startswith("Hint: ")]
    assert hint, out.stdout
    assert "maxSeqLength 8" in hint[0] and "raise config.maxSeqLength" in hint[0], hint[0]
    fits = ready("datasets", "measure", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", "4096")
    assert fits.returncode == 0 and "Hint:" not in fits.stdout
