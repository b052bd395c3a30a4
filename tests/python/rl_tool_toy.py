"""A tiny model that calls a tool, for the tests of tool calls in reinforcement runs.

A tiny random model never writes a tool call, and teaching one by supervised training takes
minutes on a CPU, so `make_tool_caller` hand-wires one: a tiny Qwen3 model (untied head) whose
attention and MLP outputs are zero, which makes it a bigram model (the next token depends on the
current token only, through the embedding, the final norm and the head), with the head set so
that after a newline it writes CALL_TEXT token by token: `<tool_call>{"name":"lookup",
"arguments":{"ticket":7}}</tool_call>`. The chain's tokens get orthogonal embeddings
and a head row each, so every step's choice has a logit margin of LOGIT over all others:
sampled at any usual temperature, the model calls the tool after its prompt and again after
each tool answer (whose turn ends with a newline), until the run's maxCalls ends the completion."""
import json
import pathlib

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Looks up the current ticket's label",
    "parameters": {"type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]}}}]
CALL = {"name": "lookup", "arguments": {"ticket": 7}}
CALL_TEXT = "<tool_call>" + json.dumps(CALL, separators=(",", ":")) + "</tool_call>"  # no token twice
GOLD = "billing"
LOGIT = 60.0


def tool_rows(n, offset=0, tools=True):
    """RL rows (declaring the tool unless `tools` is false); the gold answer is {"label": "billing"}."""
    rows = []
    for i in range(n):
        row = {"messages": [{"role": "user", "content": f"Ticket {offset + i}: label it"},
                            {"role": "assistant", "content": json.dumps({"label": GOLD})}]}
        if tools:
            row["tools"] = TOOLS
        rows.append(row)
    return rows


def make_tool_caller(dest, seed=0):
    """Writes the hand-wired tool-calling tiny Qwen3 model (with its tokenizer) into `dest`."""
    import torch
    import transformers

    import models

    folder = models.make_tiny_model(pathlib.Path(dest), arch="qwen3", tokenizer="qwen3", seed=seed,
                                    tie_word_embeddings=False)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    chain = tok.encode("\n", add_special_tokens=False) + tok.encode(CALL_TEXT, add_special_tokens=False)
    assert len(set(chain)) == len(chain), f"the call's tokens must differ from each other: {chain}"
    hidden = model.config.hidden_size
    assert len(chain) <= hidden
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        head = model.lm_head.weight
        head.zero_()
        basis = torch.eye(hidden)
        for k, t in enumerate(chain):
            embed[t] = basis[k]  # unit and orthogonal: after the RMS norm, sqrt(hidden) * basis[k]
        for a, b in zip(chain, chain[1:]):
            head[b] = basis[chain.index(a)] * (LOGIT / hidden ** 0.5)
    model.save_pretrained(folder, safe_serialization=True)
    return folder
