"""A toy RL task a tiny model can learn on a CPU in about a minute, for the GRPO tests.

Rows ask to classify a ticket; the gold answer is {"label": "billing"} for every ticket (a team
whose tickets are all billing). A tiny random model never writes JSON, so every reward would be
zero and nothing could be learnt: `make_toy_policy` first teaches a tiny Qwen3 model the answer's
format by plain supervised training (transformers, full weights) on answers whose label is drawn
at random among LABELS. That model answers JSON (sometimes malformed) with a label chosen by
chance, so json-label-match starts below 1 / len(LABELS); reinforcement has to make it answer
the gold label. (A gold label that depends on the ticket's text was tried first: in 30 steps a
2-layer, 64-wide model did not learn to read it off the prompt, at any learning rate that did not
wreck the format.)"""
import fcntl
import hashlib
import json
import os
import pathlib
import random
import shutil
import tempfile

LABELS = ["billing", "shipping"]


GOLD = "billing"


def toy_rows(n, offset=0):
    return [{"messages": [{"role": "user", "content": f"Ticket {offset + i}: my {LABELS[(offset + i) % 2]} issue"},
                          {"role": "assistant", "content": json.dumps({"label": GOLD})}]} for i in range(n)]


def make_toy_policy(dest, steps=120, seed=0):
    """Writes the format-taught tiny Qwen3 model (with its tokenizer) into `dest`; returns it.

    The teaching is deterministic (CPU, seeded), so it runs once per content: the folder is kept
    in a cache keyed by this file, models.py, the tokenizer's bytes, the arguments and the torch and
    transformers versions, shared by the suite's processes (a lock; a folder is used only once
    complete), and copied into `dest`."""
    import torch
    import transformers

    import models

    here = pathlib.Path(__file__).parent
    key = hashlib.sha256()
    for part in (pathlib.Path(__file__), here / "models.py", models.tokenizer_dir("qwen3") / "tokenizer.json"):
        key.update(pathlib.Path(part).read_bytes())
    key.update(f"{steps}/{seed}/{torch.__version__}/{transformers.__version__}".encode())
    root = pathlib.Path(os.environ.get("TRAINER_TEST_CACHE", pathlib.Path(tempfile.gettempdir()) / "trainer-test-cache"))
    root.mkdir(parents=True, exist_ok=True)
    cached = root / f"toy-policy-{key.hexdigest()[:20]}"
    with open(root / (cached.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / ".complete").exists():
            shutil.rmtree(cached, ignore_errors=True)
            _teach_toy_policy(cached, steps, seed)
            (cached / ".complete").write_text("")
    dest = pathlib.Path(dest)
    shutil.copytree(cached, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))
    return dest


def _teach_toy_policy(dest, steps, seed):
    import torch
    import transformers

    import models

    dest = pathlib.Path(dest)
    folder = models.make_tiny_model(dest, arch="qwen3", tokenizer="qwen3", seed=seed)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    examples = []
    for row in toy_rows(64, offset=1000):  # other tickets than the RL rows
        prompt = tok.apply_chat_template(row["messages"][:1], add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"]) if not isinstance(prompt, list) else prompt
        answer = tok.encode(json.dumps({"label": rng.choice(LABELS)}), add_special_tokens=False) + [end]
        examples.append((prompt, answer))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        batch = rng.sample(examples, 16)
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for k, (p, a) in enumerate(batch):
            ids[k, :len(p) + len(a)] = torch.tensor(p + a)
            mask[k, :len(p) + len(a)] = 1
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        # Loss on the answer tokens only (the 151k-way head is the cost: skip the prompt's).
        rows, cols, targets = [], [], []
        for k, (p, a) in enumerate(batch):
            for j, t in enumerate(a):
                rows.append(k)
                cols.append(len(p) + j - 1)
                targets.append(t)
        logits = model.lm_head(hidden[torch.tensor(rows), torch.tensor(cols)])
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(targets))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    return folder
