"""verl's custom reward function (reward.custom_reward_function): each completion verl's reward
workers score is relayed to the verl worker (verl_worker.py, RewardRelay), which asks trainer-job's
own graders, exactly as a TRL or native run's rewards are scored. The relay's address travels in
each row's extra_info (the worker writes it into the parquet it hands verl)."""
from __future__ import annotations

import json
import urllib.request


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    info = extra_info or {}
    body = json.dumps({"row": int(info.get("line", 0)), "input": info.get("input", ""), "output": solution_str,
                       "expected": ground_truth}).encode()
    request = urllib.request.Request(info["relay"], data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        return float(json.loads(reply.read())["reward"])
