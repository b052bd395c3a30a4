#!/usr/bin/env python3
"""Test-only (docs/engines.md, "Test hooks"): plays back a recorded verl run in the place of
`python -m verl.trainer.main_ppo`, for the verl worker and trainer-job's bridge to be exercised on a
machine without a GPU. It takes main_ppo's own arguments (the plan's hydra overrides) and the
recording named by TRAINER_VERL_REPLAY, a JSON object:

    steps     [{"data": {verl metric: value}, "outputs": [completion, ...]}, ...]  one per verl step
    saves     {"N": adapter folder}  the LoRA adapter verl's step N save (and its merge) yields
    say       [line, ...]            printed first, as verl prints its log
    exitCode  main_ppo's exit status (0)

Each step's completions are scored as verl scores them: by the custom reward function the overrides
name (engines/verl/reward.py, the job's graders through the worker's relay), the batch's
train_batch_size prompts from the parquet, rollout.n completions each, in order. Then the step's
metrics go to verl's file logger (VERL_FILE_LOGGER_PATH) and its save, if any, to
default_local_dir/global_step_N/actor/lora_adapter with latest_checkpointed_iteration.txt, verl's
layout. Nothing of verl runs here: the translation, the relay, the logger's lines and the save
layout are what is exercised."""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import sys


def main() -> int:
    # main_ppo's arguments read as main_ppo reads them: hydra's override grammar
    from hydra.core.override_parser.overrides_parser import OverridesParser
    keys = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(sys.argv[1:])}
    record = json.loads(pathlib.Path(os.environ["TRAINER_VERL_REPLAY"]).read_text())
    for line in record.get("say", []):
        print(line, flush=True)
    import pandas
    prompts = pandas.read_parquet(keys["data.train_files"]).to_dict("records")
    spec = importlib.util.spec_from_file_location("verl_reward", keys["reward.custom_reward_function.path"])
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    score = getattr(reward, keys["reward.custom_reward_function.name"])
    batch, n = int(keys["data.train_batch_size"]), int(keys["actor_rollout_ref.rollout.n"])
    checkpoints = pathlib.Path(keys["trainer.default_local_dir"])
    for step, recorded in enumerate(record.get("steps", []), 1):
        for i, output in enumerate(recorded["outputs"]):
            row = prompts[((step - 1) * batch + i // n) % len(prompts)]
            score(row["data_source"], output, row["reward_model"]["ground_truth"], extra_info=row["extra_info"])
        with open(os.environ["VERL_FILE_LOGGER_PATH"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"step": step, "data": recorded["data"]}) + "\n")
        adapter = record.get("saves", {}).get(str(step))
        if adapter:
            shutil.copytree(adapter, checkpoints / f"global_step_{step}" / "actor" / "lora_adapter")
            (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))
    return int(record.get("exitCode", 0))


if __name__ == "__main__":
    sys.exit(main())
