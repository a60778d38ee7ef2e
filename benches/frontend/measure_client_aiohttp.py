"""Times what a Python benchmark client adds to the TTFT it measures, on loopback.

inference-perf (`inference_perf/client/modelserver/openai_client.py`) and vLLM's own
`vllm bench serve` stream with aiohttp: the client takes `time.perf_counter()` just before
`session.post(...)` on a keep-alive connection pool, reads the body with
`response.content.iter_any()`, splits SSE messages at blank lines, `json.loads` each one and
stamps a message when it is split off (inference-perf's `parse_sse_stream`). A measured TTFT
therefore holds, besides the server's time, the client's request path (aiohttp building and
writing the request) and its response path (reading the first chunk, waking the request's
task, parsing it). Both are timed here against a minimal asyncio server in another process
(perf_counter is CLOCK_MONOTONIC, shared by processes), which stamps the request when it has
read it whole and the first chunk when it writes it:

- request out: client start → server has the request;
- response in: server writes the first chunk → client stamps it;
- per chunk: the client's CPU per streamed chunk, from streams of 1 and 1,001 chunks;
- a step's chunks: `k` streams each get one chunk at the same instant (one engine step's
  tokens), and the last of them is stamped this late after the write: one client process
  handles its streams' chunks one after another.

Needs only `pip install aiohttp` (the version inference-perf pins: >= 3.11.11):

    python benches/frontend/measure_client_aiohttp.py
"""

import asyncio
import json
import multiprocessing as mp
import statistics
import time

PORT = 18733
CHUNK = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,'
    b'"finish_reason":null}]}\n\n'
)
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def frame(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


def serve(ready, stamps):
    """One response per request: `n` chunks; `sync` requests wait for a shared step."""
    step = {"waiters": [], "k": 0}

    async def handle(reader, writer):
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed its keep-alive connection
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            got = time.perf_counter()
            req = json.loads(body)
            n, k = req["chunks"], req.get("step", 0)
            if k:
                # Gather k streams, then write one chunk to each at once.
                fut = asyncio.get_running_loop().create_future()
                step["waiters"].append((writer, fut))
                if len(step["waiters"]) == k:
                    batch, step["waiters"] = step["waiters"], []
                    first = time.perf_counter()
                    for w, _ in batch:
                        w.write(HEAD + frame(CHUNK))
                    # The next step's tokens: one more chunk to every open stream at once.
                    await asyncio.sleep(0.02)
                    second = time.perf_counter()
                    for w, _ in batch:
                        w.write(frame(CHUNK))
                    for _, f in batch:
                        f.set_result((first, second))
                wrote = await fut
                writer.write(frame(b"data: [DONE]\n\n") + frame(b""))
                stamps.put((got, wrote))
                await writer.drain()
                continue
            wrote = time.perf_counter()
            writer.write(HEAD + frame(CHUNK))
            for _ in range(n - 1):
                writer.write(frame(CHUNK))
            writer.write(frame(b"data: [DONE]\n\n") + frame(b""))
            await writer.drain()
            stamps.put((got, wrote))

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", PORT)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def stream(session, payload):
    """inference-perf's request path, as its client takes its times."""
    data = json.dumps(payload)
    start = time.perf_counter()
    times = []
    async with session.post(f"http://127.0.0.1:{PORT}/v1/chat/completions", data=data) as resp:
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                message, buffer = buffer.split(b"\n\n", 1)
                stamp = time.perf_counter()
                for line in message.split(b"\n"):
                    if line.startswith(b"data:"):
                        text = line.removeprefix(b"data: ").strip()
                        if text == b"[DONE]":
                            break
                        delta = json.loads(text)["choices"][0]["delta"]
                        if delta.get("content"):
                            times.append(stamp)
    return start, times


async def client(stamps):
    import aiohttp

    prompt = "word " * 590
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2500)) as session:
        for _ in range(50):
            await stream(session, {"chunks": 1, "messages": [{"content": prompt}]})
        for _ in range(50):
            stamps.get()
        out, back = [], []
        for _ in range(500):
            start, times = await stream(session, {"chunks": 1, "messages": [{"content": prompt}]})
            got, wrote = stamps.get()
            out.append((got - start) * 1e6)
            back.append((times[0] - wrote) * 1e6)
        print(f"request out (start -> server has it): median {statistics.median(out):.0f} us")
        print(f"response in (first chunk written -> stamped): median {statistics.median(back):.0f} us")
        cpu = {}
        for n, reps in ((1, 300), (1001, 30)):
            t0 = time.process_time()
            for _ in range(reps):
                await stream(session, {"chunks": n, "messages": [{"content": prompt}]})
                stamps.get()
            cpu[n] = (time.process_time() - t0) / reps * 1e6
        per_chunk = (cpu[1001] - cpu[1]) / 1000
        print(f"client CPU: {per_chunk:.1f} us per chunk, {cpu[1] - per_chunk:.0f} us per request")
        lags = {}
        for k in (8, 32, 128):
            first, later = [], []
            for _ in range(20):
                runs = await asyncio.gather(
                    *(stream(session, {"chunks": 1, "step": k, "messages": [{"content": prompt}]})
                      for _ in range(k))
                )
                (w1, w2) = [stamps.get()[1] for _ in range(k)][0]
                first.append((max(t[0] for _, t in runs) - w1) * 1e6)
                later.append((max(t[1] for _, t in runs) - w2) * 1e6)
            lags[k] = statistics.median(later)
            print(
                f"{k:4d} streams get a chunk at once: the last stamped "
                f"{statistics.median(first):.0f} us after the write (first chunks), "
                f"{statistics.median(later):.0f} us (open streams), "
                f"{statistics.median(later) / k:.1f} us per stream"
            )
        print(f"marginal: {(lags[128] - lags[8]) / 120:.1f} us per open stream a step")


def main():
    ready = mp.Event()
    stamps = mp.Queue()
    p = mp.Process(target=serve, args=(ready, stamps), daemon=True)
    p.start()
    ready.wait()
    try:
        import uvloop
        uvloop.install()  # inference-perf runs its workers on uvloop
    except ImportError:
        pass
    asyncio.run(client(stamps))
    p.terminate()


if __name__ == "__main__":
    main()
