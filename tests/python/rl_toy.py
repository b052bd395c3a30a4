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
import json
import pathlib
import random

LABELS = ["billing", "shipping"]


GOLD = "billing"


def toy_rows(n, offset=0):
    return [{"messages": [{"role": "user", "content": f"Ticket {offset + i}: my {LABELS[(offset + i) % 2]} issue"},
                          {"role": "assistant", "content": json.dumps({"label": GOLD})}]} for i in range(n)]


def make_toy_policy(dest, steps=120, seed=0):
    """Writes the format-taught tiny Qwen3 model (with its tokenizer) into `dest`; returns it."""
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
