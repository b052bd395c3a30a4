#!/usr/bin/env python3
"""Side B of bench/serve: transformers' `generate` behind a minimal OpenAI-style server, as a
competent user would write one without a serving engine.

- asyncio HTTP server (the standard library only: no web framework is installed in .venv):
  `GET /health`, `GET /v1/models`, `POST /v1/chat/completions` (streamed as server-sent events
  with `stream_options.include_usage`, or whole).
- Batching: a batcher task takes every request waiting when the model is free (up to
  --max-batch) into one left-padded batch per `generate` call, after letting a request that
  finds the model idle wait --batch-wait-ms (20) for the rest of its burst; requests that arrive
  during a call wait for the next one (static batching: no joining a running batch).
- Adapters: PEFT's multi-adapter model, every adapter loaded once; each row names its adapter
  through `generate(adapter_names=[...])` ("__base__" for the base model), so one call mixes
  adapters.
- Streaming: a streamer receives each step's [B] new tokens from `generate` (run in a worker
  thread) and hands them to the rows' queues in the event loop; each row's text is decoded
  incrementally and sent as it grows. A row stops at its own `max_tokens` or end-of-sequence
  (unless `ignore_eos`); the batch runs to its longest row.
- Greedy when the batch's requests ask temperature 0, else sampling with their temperature and
  top_p (the first request's: the bench sends one setting).

    .venv/bin/python bench/serve/hf_server.py --model DIR --adapter NAME=DIR ... [--port 0]
Prints {"event":"listening","port":N,"models":[...]} once ready.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

from client import read_head  # bench/serve/client.py: the same header parsing as the bench's client


class Row:
    def __init__(self, ids, adapter, max_tokens, ignore_eos):
        self.ids, self.adapter, self.max_tokens, self.ignore_eos = ids, adapter, max_tokens, ignore_eos
        self.queue: asyncio.Queue = asyncio.Queue()
        self.out: list[int] = []
        self.done = False


class Streamer:
    """transformers' streamer protocol: put() gets the prompt first, then each step's [B] tokens."""

    def __init__(self, loop, rows, eos_ids):
        self.loop, self.rows, self.eos_ids, self.seen_prompt = loop, rows, eos_ids, False

    def put(self, value):
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        for row, tok in zip(self.rows, value.reshape(-1).tolist()):
            if row.done:
                continue
            row.out.append(tok)
            end = len(row.out) >= row.max_tokens or (not row.ignore_eos and tok in self.eos_ids)
            row.done = end
            self.loop.call_soon_threadsafe(row.queue.put_nowait, (tok, end))

    def end(self):
        for row in self.rows:
            if not row.done:
                row.done = True
                self.loop.call_soon_threadsafe(row.queue.put_nowait, (None, True))


class Server:
    def __init__(self, a):
        import peft
        import torch
        import transformers

        torch.set_num_threads(a.threads)
        self.torch = torch
        self.tok = transformers.AutoTokenizer.from_pretrained(a.model)
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
        self.base_name = a.name
        self.adapters = []
        for spec in a.adapter:
            name, _, path = spec.partition("=")
            if not self.adapters:
                model = peft.PeftModel.from_pretrained(model, path, adapter_name=name)
            else:
                model.load_adapter(path, adapter_name=name)
            self.adapters.append(name)
        self.model = model.eval()
        self.max_batch, self.batch_wait = a.max_batch, a.batch_wait_ms / 1000
        eos = model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        self.waiting: list[tuple[Row, dict]] = []
        self.wake = asyncio.Event()

    def models(self):
        return [self.base_name] + self.adapters

    async def batcher(self):
        loop = asyncio.get_running_loop()
        while True:
            await self.wake.wait()
            self.wake.clear()
            # Requests of a burst arrive a few ms apart: give them a moment to join the first.
            if len(self.waiting) < self.max_batch and self.batch_wait > 0:
                await asyncio.sleep(self.batch_wait)
            while self.waiting:
                batch, self.waiting = self.waiting[: self.max_batch], self.waiting[self.max_batch:]
                await loop.run_in_executor(None, self.generate, loop, batch)

    def generate(self, loop, batch):
        torch = self.torch
        rows = [r for r, _ in batch]
        params = batch[0][1]
        width = max(len(r.ids) for r in rows)
        ids = torch.tensor([[self.pad_id] * (width - len(r.ids)) + r.ids for r in rows])
        mask = torch.tensor([[0] * (width - len(r.ids)) + [1] * len(r.ids) for r in rows])
        temperature = float(params.get("temperature", 1.0))
        kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=max(r.max_tokens for r in rows),
                  pad_token_id=self.pad_id, streamer=Streamer(loop, rows, self.eos_ids))
        if temperature > 0:
            kw.update(do_sample=True, temperature=temperature, top_p=float(params.get("top_p", 1.0)), top_k=0)
        else:
            kw.update(do_sample=False)
        if all(r.ignore_eos for r in rows):
            kw["eos_token_id"] = None  # every row runs to its length
        if self.adapters:
            kw["adapter_names"] = [r.adapter for r in rows]
        try:
            with torch.inference_mode():
                self.model.generate(**kw)
        except Exception as exc:  # noqa: BLE001 -- reported to every row of the batch
            print(f"generate failed: {exc!r}", file=sys.stderr, flush=True)
            for r in rows:
                if not r.done:
                    r.done = True
                    loop.call_soon_threadsafe(r.queue.put_nowait, (None, True))

    def admit(self, body):
        """A Row for a chat completion body, or an (HTTP status, message) error."""
        name = body.get("model", self.base_name)
        if name not in self.models():
            return None, (404, f"model {name!r} not found")
        ids = self.tok.apply_chat_template(body.get("messages", []), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        adapter = "__base__" if name == self.base_name else name
        row = Row(list(ids), adapter, max_tokens, bool(body.get("ignore_eos", False)))
        self.waiting.append((row, body))
        self.wake.set()
        return row, None


async def respond(writer, status, doc):
    data = json.dumps(doc).encode()
    writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                 % (status, len(data), data))
    await writer.drain()


async def completion(server, writer, body):
    row, err = server.admit(body)
    if err:
        await respond(writer, err[0], {"error": {"message": err[1], "type": "invalid_request_error"}})
        return
    rid, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.get("model", server.base_name)
    stream = bool(body.get("stream"))
    if stream:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Connection: close\r\n\r\n")
    text, finish = "", "length"
    while True:
        tok, end = await row.queue.get()
        if tok is not None and not row.ignore_eos and tok in server.eos_ids:
            finish = "stop"
        new_text = server.tok.decode(row.out, skip_special_tokens=True)
        delta = new_text[len(text):] if not new_text.endswith("\ufffd") else ""
        if delta and stream:
            chunk = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                     "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}]}
            writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await writer.drain()
        text += delta
        if end:
            break
    usage = {"prompt_tokens": len(row.ids), "completion_tokens": len(row.out),
             "total_tokens": len(row.ids) + len(row.out)}
    if not stream:
        await respond(writer, 200, {"id": rid, "object": "chat.completion", "created": created, "model": name,
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "finish_reason": finish}], "usage": usage})
        return
    last = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    tail = [last]
    if (body.get("stream_options") or {}).get("include_usage"):
        tail.append({"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                     "choices": [], "usage": usage})
    for chunk in tail:
        writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    writer.write(b"data: [DONE]\n\n")
    await writer.drain()


async def handle(server, reader, writer):
    try:
        request, headers = await read_head(reader)
        method, path = (request.decode("latin-1").split() + ["", ""])[:2]
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if method == "GET" and path == "/health":
            await respond(writer, 200, {})
        elif method == "GET" and path == "/v1/models":
            await respond(writer, 200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models()]})
        elif method == "POST" and path == "/v1/chat/completions":
            await completion(server, writer, json.loads(body or b"{}"))
        else:
            await respond(writer, 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})
    except (ConnectionError, asyncio.IncompleteReadError, json.JSONDecodeError):
        pass
    finally:
        writer.close()


async def main_async(a):
    server = Server(a)
    batcher = asyncio.create_task(server.batcher())
    srv = await asyncio.start_server(lambda r, w: handle(server, r, w), a.host, a.port, backlog=256)
    port = srv.sockets[0].getsockname()[1]
    print(json.dumps({"event": "listening", "port": port, "models": server.models()}), flush=True)
    async with srv:
        await asyncio.gather(srv.serve_forever(), batcher)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", default="base")
    ap.add_argument("--adapter", action="append", default=[], help="NAME=DIR, repeatable")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--batch-wait-ms", type=float, default=20, help="how long a first request waits for others to join")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
