"""Times the CPU work of vLLM's OpenAI front end and engine hand-off, per request and per
streamed token, with vLLM's own classes (no GPU needed).

This is where `servesim`'s API-server defaults come from (docs: latency models, "The serving
path"). It drives the pieces a streamed chat request passes through in vLLM 0.15.1:

- request in: the chat request parsed by vLLM's pydantic protocol class, the chat template
  rendered and the prompt tokenized by a HuggingFace fast tokenizer, the `EngineCoreRequest`
  msgpack-encoded by the front end and decoded by the engine core's input thread, and the
  engine's `Request` built with its prefix-cache block hashes (the tokenizer is called
  directly: the wait in vLLM's `AsyncMicrobatchTokenizer`, up to 2 ms for other prompts to
  batch with, is not CPU work and is its own term, `engine.tokenizer_window_us`);
- tokens out, per engine step of B requests: `EngineCoreOutputs` encoded by the engine core's
  output thread and decoded by the front end, `OutputProcessor.process_outputs` (incremental
  detokenization, stop checks, iteration statistics, one `RequestOutput` per request into its
  collector), then, per request, the `generate()` task woken by asyncio, the SSE chunk built
  with vLLM's `ChatCompletionStreamResponse` and `model_dump_json`, and written to a socket;
  then the same with 2 and 4 tokens a request and step (a speculative step's accepted
  tokens, one chunk) against one, for what each extra token of a chunk costs.

Run (a virtual environment with `pip install vllm==0.15.1`; the tokenizer is the 32k
SentencePiece one that `mistral_common`, a vLLM dependency, ships as `tokenizer.model.v1`,
converted once by `transformers`):

    python benches/frontend/measure_vllm_frontend.py

It prints the fitted per-request and per-token costs. Nothing here reaches a network.
"""

import asyncio
import gc
import json
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import time

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from transformers import LlamaTokenizerFast  # noqa: E402
import mistral_common  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.sampling_params import RequestOutputKind  # noqa: E402
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest  # noqa: E402
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector  # noqa: E402
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import (  # noqa: E402
    ChatCompletionRequest,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
)
from vllm.entrypoints.openai.engine.protocol import DeltaMessage  # noqa: E402

WORDS = (
    "the of and to in is was for on are with as by at from that this be it an or have not "
    "which one all were when we there can more if out so what up about into than them only "
    "system serving latency request model token cache batch engine scheduler prefix decode"
).split()


def tokenizer():
    d = pathlib.Path(tempfile.mkdtemp())
    spm = pathlib.Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"
    t = LlamaTokenizerFast(vocab_file=str(spm), legacy=False)
    t.chat_template = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
        "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{{ m['content'] }}{% endif %}"
        "{% endfor %}"
    )
    t.save_pretrained(d)
    return LlamaTokenizerFast.from_pretrained(d)


def text(n_words, seed):
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n_words))


def best_of(f, reps=5):
    """Minimum over reps of the mean time of one call of f (it runs a loop itself)."""
    out = []
    for _ in range(reps):
        gc.collect()
        out.append(f())
    return min(out)


def fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def measure_input(tok):
    enc, dec = MsgpackEncoder(), MsgpackDecoder(EngineCoreRequest)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(16, sha256)
    rows = []
    for words in (60, 250, 500, 1000, 1500):
        body = json.dumps(
            {
                "model": "m",
                "stream": True,
                "max_tokens": 250,
                "messages": [
                    {"role": "system", "content": text(words // 5, 1)},
                    {"role": "user", "content": text(words - words // 5, 2)},
                ],
            }
        )

        def once(k=40):
            t0 = time.perf_counter()
            for i in range(k):
                req = ChatCompletionRequest.model_validate_json(body)
                msgs = [m if isinstance(m, dict) else dict(m) for m in req.messages]
                prompt = tok.apply_chat_template(msgs, tokenize=False)
                ids = tok.encode(prompt, add_special_tokens=False)
                ecr = EngineCoreRequest(
                    request_id=f"r{i}",
                    prompt_token_ids=ids,
                    mm_features=None,
                    sampling_params=SamplingParams(max_tokens=250),
                    pooling_params=None,
                    eos_token_id=tok.eos_token_id,
                    arrival_time=0.0,
                    lora_request=None,
                    cache_salt=None,
                    data_parallel_rank=None,
                )
                wire = enc.encode(ecr)
                back = dec.decode(wire)
                Request.from_engine_core_request(back, hasher)
            return (time.perf_counter() - t0) / k, len(ids)

        us = best_of(lambda: once()[0]) * 1e6
        rows.append((once(1)[1], us))
    a, b = fit([r[0] for r in rows], [r[1] for r in rows])
    return rows, a, b


async def measure_output(tok, batch, steps=60, per_chunk=1):
    """Mean µs per engine step of `batch` requests, each given `per_chunk` new tokens a step
    (more than one under speculative decoding), from the engine's output thread to the SSE
    chunks written."""
    enc, dec = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
    proc = OutputProcessor(tok, log_stats=True)
    ids = tok.encode(text(400, 3), add_special_tokens=False)
    stream = [ids[i % len(ids)] for i in range(steps * per_chunk + 8)]
    collectors = []
    for r in range(batch):
        ecr = EngineCoreRequest(
            request_id=f"r{r}",
            prompt_token_ids=ids[:100],
            mm_features=None,
            sampling_params=SamplingParams(
                max_tokens=100000, output_kind=RequestOutputKind.DELTA, ignore_eos=True
            ),
            pooling_params=None,
            eos_token_id=tok.eos_token_id,
            arrival_time=0.0,
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            external_req_id=f"r{r}",
        )
        q = RequestOutputCollector(RequestOutputKind.DELTA, f"r{r}")
        proc.add_request(ecr, None, None, 0, q)
        collectors.append(q)
    rsock, wsock = socket.socketpair()
    rsock.setblocking(False)
    _, writer = await asyncio.open_connection(sock=wsock)
    drained = [0]

    def drain():
        try:
            while True:
                drained[0] += len(rsock.recv(1 << 20))
        except BlockingIOError:
            pass

    done = asyncio.Event()
    left = [batch]

    async def generate(q, r):
        created = int(time.time())
        for _ in range(steps):
            out = await q.get()
            choice = ChatCompletionResponseStreamChoice(
                index=0, delta=DeltaMessage(content=out.outputs[0].text), logprobs=None,
                finish_reason=None,
            )
            chunk = ChatCompletionStreamResponse(
                id=f"chatcmpl-{r}", object="chat.completion.chunk", created=created,
                choices=[choice], model="m",
            )
            data = chunk.model_dump_json(exclude_unset=True)
            writer.write(f"data: {data}\n\n".encode())
        left[0] -= 1
        if left[0] == 0:
            done.set()

    tasks = [asyncio.create_task(generate(q, r)) for r, q in enumerate(collectors)]
    await asyncio.sleep(0)
    gc.collect()
    t0 = time.perf_counter()
    for s in range(steps):
        outs = EngineCoreOutputs(
            outputs=[EngineCoreOutput(request_id=f"r{r}",
                                      new_token_ids=stream[s * per_chunk:(s + 1) * per_chunk])
                     for r in range(batch)]
        )
        wire = enc.encode(outs)
        got = dec.decode(wire)
        for start in range(0, batch, 128):
            proc.process_outputs(got.outputs[start:start + 128], got.timestamp, None)
            await asyncio.sleep(0)
        # Let every generate() task render and write its chunk before the next step.
        while any(q.output is not None for q in collectors):
            await asyncio.sleep(0)
        drain()
    await done.wait()
    elapsed = time.perf_counter() - t0
    for t in tasks:
        await t
    writer.close()
    return elapsed / steps * 1e6


def main():
    tok = tokenizer()
    print(f"python {sys.version.split()[0]}; vllm classes from {SamplingParams.__module__}")
    rows, a, b = measure_input(tok)
    print("request in (parse, template, tokenize, hand-off, engine Request with block hashes):")
    for n, us in rows:
        print(f"  {n:5d} prompt tokens: {us:8.1f} us")
    print(f"  fit: {a:.1f} us + {b:.3f} us per prompt token")
    pts = []
    for batch in (1, 8, 32, 64, 128):
        per_step = min(asyncio.run(measure_output(tok, batch)) for _ in range(3))
        pts.append((batch, per_step))
        print(f"tokens out, batch {batch:4d}: {per_step:8.1f} us per step, "
              f"{per_step / batch:6.1f} us per token")
    a, b = fit([p[0] for p in pts], [p[1] for p in pts])
    print(f"  fit: {a:.1f} us per step + {b:.2f} us per streamed token")
    # Several tokens in one chunk (a speculative step's accepted tokens): what the extra
    # tokens cost beyond the chunk's own.
    for batch in (32, 128):
        one = min(asyncio.run(measure_output(tok, batch)) for _ in range(3))
        for k in (2, 4):
            per_step = min(asyncio.run(measure_output(tok, batch, per_chunk=k)) for _ in range(3))
            print(f"tokens out, batch {batch:4d}, {k} tokens a chunk: {per_step:8.1f} us per step "
                  f"(1 token: {one:.1f} us), "
                  f"{(per_step - one) / (batch * (k - 1)):5.2f} us per extra token")


if __name__ == "__main__":
    main()
