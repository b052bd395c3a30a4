"""Plans and rows the service tests submit."""
import json

CHAT_ROWS = [
    {"messages": [{"role": "user", "content": f"Classify ticket {i}: printer on fire"},
                  {"role": "assistant", "content": json.dumps({"label": "urgent" if i % 2 else "normal"})}]}
    for i in range(8)
]


def jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)



def plan(workload="triage", dataset="train", gpus=0, steps=3, **extra) -> dict:
    p = {"kind": "run", "workload": workload, "baseModel": "tiny/qwen3",
         "config": {"dataset": dataset, "method": "sft", "maxSeqLength": 64,
                    "hyperparams": {"training": {"maxSteps": steps, "batchSize": 2}, "lora": {"rank": 4}},
                    "model": {"precision": "FP32"}},
         "execution": {"gpus": gpus}}
    p.update(extra)
    return p
