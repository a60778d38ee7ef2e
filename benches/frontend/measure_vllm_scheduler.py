"""Times vLLM's engine-core CPU work per step (the v1 `Scheduler.schedule()` and
`update_from_output()`) for a running batch of B decoding requests, with vLLM 0.15.1's own
scheduler on a KV cache of 7,463 blocks (no GPU needed: the model's output is a list of
sampled token ids). Without async scheduling this work sits between two GPU steps; with it
(vLLM >= 0.14's default) it overlaps the step in flight.

    python benches/frontend/measure_vllm_scheduler.py
"""

import os
import pathlib
import tempfile
import time
import json
import gc

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.engine import EngineCoreRequest  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402

LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05, "torch_dtype": "float16", "vocab_size": 32000,
}


def scheduler(blocks=7463, block_size=16):
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "config.json").write_text(json.dumps(LLAMA2_7B))
    mc = ModelConfig(model=str(d), dtype="float16", max_model_len=4096, skip_tokenizer_init=True)
    sc = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048, max_model_len=4096,
                         is_encoder_decoder=False)
    cc = CacheConfig(block_size=block_size, gpu_memory_utilization=0.9, cache_dtype="auto",
                     enable_prefix_caching=True)
    cc.num_gpu_blocks = blocks
    vc = VllmConfig(model_config=mc, scheduler_config=sc, cache_config=cc,
                    device_config=DeviceConfig(device="cpu"))
    kv = KVCacheConfig(
        num_blocks=blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layers.0"], FullAttentionSpec(
            block_size=block_size, num_kv_heads=32, head_size=128, dtype=torch.float16))],
    )
    return Scheduler(vllm_config=vc, kv_cache_config=kv,
                     structured_output_manager=StructuredOutputManager(vc),
                     block_size=block_size, log_stats=True)


def measure(batch, steps=200):
    init_none_hash(sha256)
    hasher = get_request_block_hasher(16, sha256)
    s = scheduler()
    for r in range(batch):
        ecr = EngineCoreRequest(
            request_id=f"r{r}", prompt_token_ids=[(r * 31 + i) % 31000 + 10 for i in range(590)],
            mm_features=None, sampling_params=SamplingParams(max_tokens=100000, ignore_eos=True),
            pooling_params=None, eos_token_id=2, arrival_time=0.0, lora_request=None,
            cache_salt=None, data_parallel_rank=None, external_req_id=f"r{r}",
        )
        s.add_request(Request.from_engine_core_request(ecr, hasher))

    def step():
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=[[17] for _ in ids])
        s.update_from_output(out, mro)

    while any(r.num_computed_tokens < r.num_prompt_tokens for r in s.requests.values()):
        step()  # prefills
    for _ in range(20):
        step()
    gc.collect()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best * 1e6


def main():
    pts = [(b, measure(b)) for b in (1, 8, 32, 64, 96, 128)]
    for b, us in pts:
        print(f"batch {b:4d}: {us:8.1f} us per step (schedule + update_from_output)")
    n = len(pts)
    mx = sum(b for b, _ in pts) / n
    my = sum(u for _, u in pts) / n
    k = sum((b - mx) * (u - my) for b, u in pts) / sum((b - mx) ** 2 for b, _ in pts)
    print(f"fit: {my - k * mx:.1f} us per step + {k:.2f} us per running request")


if __name__ == "__main__":
    main()
