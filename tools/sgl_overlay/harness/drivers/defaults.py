"""Harness-side defaults: the KV-cache dtype names it maps, and the
ServerArgs field defaults used where the tree's own ServerArgs does not load."""
import torch

KV_DTYPES = {
    "auto": None,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}

# ServerArgs defaults for the fields the sizing reads, used where the tree's own
# ServerArgs dataclass cannot be loaded to supply them.
FALLBACK_DEFAULTS = dict(
    max_running_requests=None,
    max_total_tokens=None,
    max_mamba_cache_size=None,
    mamba_full_memory_ratio=0.9,
    mamba_scheduler_strategy="no_buffer",
    disable_radix_cache=False,
    disable_overlap_schedule=False,
    enable_dp_attention=False,
    dp_size=1,
    pp_size=1,
    tp_size=1,
    page_size=1,
    speculative_algorithm=None,
    speculative_num_draft_tokens=None,
    speculative_num_steps=None,
    speculative_eagle_topk=None,
    disaggregation_mode="null",
    enable_memory_saver=False,
    attention_backend=None,
    enable_double_sparsity=False,
    enable_mixed_chunk=False,
    speculative_draft_model_path=None,
    speculative_draft_model_revision=None,
    speculative_dflash_block_size=None,
    speculative_draft_window_size=None,
    speculative_moe_runner_backend=None,
    speculative_skip_dp_mlp_sync=False,
    moe_runner_backend="auto",
    trust_remote_code=False,
    json_model_override_args="{}",
    device="cuda",
    speculative_draft_attention_backend=None,
    enable_dp_lm_head=False,
    moe_a2a_backend="none",
    speculative_moe_a2a_backend=None,
    attn_cp_size=1,
    revision=None,
    enable_pdmux=False,
    enable_hisparse=False,
    qsa_indexer_dtype=None,
    prefill_only_disable_kv_cache=False,  # read when the pools are built (allocation.py)
)
