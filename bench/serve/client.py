"""The load generator of bench/serve: streamed chat completions over plain asyncio sockets.

One client for every side, so each is timed alike and the client's own cost stays small (no
HTTP library: the bench shares the machine's cores with the server it measures). A request
opens its own connection (`Connection: close`), sends one `POST /v1/chat/completions` with
`stream: true` and `stream_options.include_usage`, and reads the server-sent events, whether
the body comes chunked (trainer-job serve, vLLM's uvicorn) or until the connection closes.

Per request it records: the time to the first content token (first chunk whose delta has a
non-empty `content`), the gaps between consecutive content chunks (inter-token latency), the
completion tokens (`usage.completion_tokens` of the last chunk, else the content chunks
counted) and the text.
"""
from __future__ import annotations

import asyncio
import json
import time


class Result:
    __slots__ = ("text", "ttft", "gaps", "tokens", "chunks", "seconds", "prompt_tokens", "error")

    def __init__(self):
        self.text, self.ttft, self.gaps, self.tokens, self.chunks = "", None, [], 0, 0
        self.seconds, self.prompt_tokens, self.error = 0.0, None, None


async def _read_body(reader, headers):
    """Yields the body's bytes as they arrive (chunked or until EOF)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


def _handle_event(payload, res, now, last):
    """Takes one `data:` payload into `res`; returns the time of the last content chunk."""
    doc = json.loads(payload)
    if "error" in doc:
        res.error = json.dumps(doc["error"])[:300]
        return last
    usage = doc.get("usage")
    if usage:
        res.tokens = usage.get("completion_tokens", res.tokens)
        res.prompt_tokens = usage.get("prompt_tokens")
    for choice in doc.get("choices") or []:
        content = (choice.get("delta") or {}).get("content")
        if content:
            res.text += content
            res.chunks += 1
            if last is None:
                res.ttft = now
            else:
                res.gaps.append(now - last)
            last = now
    return last


async def chat(host, port, body, timeout=600.0):
    """One streamed chat completion; times in seconds from the moment the request is sent."""
    res = Result()
    body = dict(body, stream=True, stream_options={"include_usage": True})
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     b"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                     % (host.encode(), port, len(data), data))
        await writer.drain()
        res_ = await asyncio.wait_for(_read_response(reader, res, t0), timeout)
        writer.close()
        return res_
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        res.seconds = time.perf_counter() - t0
        return res


async def read_head(reader):
    """An HTTP message's first line and its headers (names lower-cased)."""
    first = await reader.readline()
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    return first, headers


async def _read_response(reader, res, t0):
    status, headers = await read_head(reader)
    code = int(status.split()[1]) if len(status.split()) > 1 else 0
    buf, last = b"", None
    async for data in _read_body(reader, headers):
        now = time.perf_counter() - t0
        if code != 200:
            buf += data
            continue
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                line = line.strip()
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    last = _handle_event(line[5:].strip(), res, now, last)
    if code != 200:
        res.error = f"HTTP {code}: {buf[:300].decode(errors='replace')}"
    if not res.tokens:
        res.tokens = res.chunks
    res.seconds = time.perf_counter() - t0
    return res


async def run_load(host, port, bodies, concurrency):
    """Sends `bodies` with at most `concurrency` in flight (a closed loop: each finished request
    starts the next). Returns (results in order, wall seconds)."""
    results = [None] * len(bodies)
    queue = list(range(len(bodies)))[::-1]

    async def worker():
        while queue:
            i = queue.pop()
            results[i] = await chat(host, port, bodies[i])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
    return results, time.perf_counter() - t0


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list; None for an empty one."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-q * len(ordered) // 100))
    return ordered[int(rank) - 1]


def summarize(results, wall):
    """The figures of one configuration: throughput over the wall time, latencies in ms."""
    ok = [r for r in results if r.error is None]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    gaps = [g for r in ok for g in r.gaps]
    tokens = sum(r.tokens for r in ok)
    ms = lambda v: None if v is None else round(v * 1000, 1)  # noqa: E731
    return {
        "requests": len(results), "errors": len(results) - len(ok), "wall_s": round(wall, 3),
        "output_tokens": tokens, "output_tokens_per_s": round(tokens / wall, 1),
        "requests_per_s": round(len(ok) / wall, 3),
        "ttft_p50_ms": ms(percentile(ttfts, 50)), "ttft_p99_ms": ms(percentile(ttfts, 99)),
        "itl_p50_ms": ms(percentile(gaps, 50)), "itl_p99_ms": ms(percentile(gaps, 99)),
        "first_error": next((r.error for r in results if r.error), None),
        "ttfts_ms": [ms(r.ttft) for r in results],  # in sending order: shows a queue building up
    }
