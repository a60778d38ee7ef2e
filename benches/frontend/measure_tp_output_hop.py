"""Times the hop a step's output takes with tensor parallelism > 1 in vLLM 0.15.1: the
`MultiprocExecutor`'s worker of rank 0 pickles its `ModelRunnerOutput` into a shared-memory
ring (`MessageQueue`, `vllm/distributed/device_communicators/shm_broadcast.py`) and the
engine-core process, spinning on that ring with `sched_yield`, unpickles it. With one GPU the
`UniProcExecutor` runs the model in the engine core and there is no such hop.

Two processes play the two roles with vLLM's own classes (no GPU needed): the engine core
broadcasts a small RPC (`sample_tokens`) and the worker answers with the output of a decode
step of B requests, stamped with `time.perf_counter()` (CLOCK_MONOTONIC, shared by the two
processes) just before `enqueue`; the engine core stamps it when `dequeue` returns.

    pip install vllm==0.15.1   # no GPU needed
    python benches/frontend/measure_tp_output_hop.py
"""

import multiprocessing as mp
import os
import statistics
import time

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from vllm.distributed.device_communicators.shm_broadcast import MessageQueue  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402

BATCHES = (1, 8, 32, 128, 256)
ROUNDS = 3000


def output(b):
    ids = [f"chatcmpl-{k:032x}-{k % 7:08x}" for k in range(b)]
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={r: k for k, r in enumerate(ids)},
        sampled_token_ids=[[1000 + k] for k in range(b)],
    )


def worker(handle, pipe):
    rpc = MessageQueue.create_from_handle(handle, 0)
    response = MessageQueue(1, 1)
    pipe.send(response.export_handle())
    rpc.wait_until_ready()
    response.wait_until_ready()
    outputs = {b: output(b) for b in BATCHES}
    while True:
        method, args, _kwargs, _rank = rpc.dequeue(indefinite=True)
        if method == "stop":
            return
        out = outputs[args[0]]
        t0 = time.perf_counter()
        response.enqueue((t0, out))


def main():
    rpc = MessageQueue(1, 1)
    parent, child = mp.Pipe()
    p = mp.Process(target=worker, args=(rpc.export_handle(), child), daemon=True)
    p.start()
    response = MessageQueue.create_from_handle(parent.recv(), 0)
    rpc.wait_until_ready()
    response.wait_until_ready()
    print("requests in the step | output hop, median µs | p90 µs")
    for b in BATCHES:
        hops = []
        for k in range(ROUNDS):
            rpc.enqueue(("sample_tokens", (b,), {}, 0))
            t0, out = response.dequeue()
            hop = (time.perf_counter() - t0) * 1e6
            assert len(out.req_ids) == b
            if k >= ROUNDS // 10:
                hops.append(hop)
        q = statistics.quantiles(hops, n=10)
        print(f"{b:>20} | {statistics.median(hops):>21.1f} | {q[8]:>6.1f}")
    rpc.enqueue(("stop", (), {}, 0))
    p.join()


if __name__ == "__main__":
    main()
