"""Times what the HTTP layer of vLLM's OpenAI server (FastAPI's StreamingResponse on uvicorn,
as `vllm serve` runs it) adds per streamed SSE chunk and per request, on loopback.

The server streams pre-rendered `data: ...` chunks (vLLM's chunk bodies are timed by
`measure_vllm_frontend.py`); the client, in another process, reads them. The server's CPU
time per chunk is what the API server's event loop spends besides rendering: the ASGI send,
HTTP chunked framing and the socket write. Run in the same virtual environment:

    python benches/frontend/measure_http_stream.py
"""

import multiprocessing as mp
import socket
import time

CHUNK = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}\n\n'


def serve(port, ready):
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    import resource

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(n: int):
        async def gen():
            for _ in range(n):
                yield CHUNK
        return StreamingResponse(gen(), media_type="text/event-stream")

    @app.get("/cpu")
    async def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return {"cpu": r.ru_utime + r.ru_stime}

    ready.set()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def request(port, path, method="POST", body=b"{}"):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
    )
    data = b""
    while chunk := s.recv(1 << 16):
        data += chunk
    s.close()
    return data


def cpu(port):
    import json
    return json.loads(request(port, "/cpu", "GET", b"").split(b"\r\n\r\n", 1)[1])["cpu"]


def main():
    port = 18731
    ready = mp.Event()
    p = mp.Process(target=serve, args=(port, ready), daemon=True)
    p.start()
    ready.wait()
    time.sleep(2.0)
    for n in (1, 1000):
        request(port, f"/v1/chat/completions?n={n}")  # warm
    res = {}
    for n, reps in ((1, 400), (2000, 20)):
        c0 = cpu(port)
        for _ in range(reps):
            request(port, f"/v1/chat/completions?n={n}")
        c1 = cpu(port)
        res[n] = (c1 - c0) / reps * 1e6
        print(f"{n:5d} chunks per request: {res[n]:9.1f} us of server CPU per request")
    per_chunk = (res[2000] - res[1]) / 1999
    print(f"per chunk: {per_chunk:.1f} us; per request (one chunk): {res[1] - per_chunk:.1f} us")
    p.terminate()


if __name__ == "__main__":
    main()
