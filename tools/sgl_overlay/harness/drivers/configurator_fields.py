"""KVCacheConfigurator fields (v0.5.16+) the harness sets to one value for
every release: the fields upstream added release by release that the
scenarios do not vary (no pipeline parallelism, no KV sharding, no MTP
draft, no extra mamba cache).  The fields computed from the scenario (the
parallel layout, the layer info, the draft config) are set by
``configurator._drive_configurator``."""

CONFIGURATOR_FIELD_DEFAULTS = dict(
    pp_group=None,
    post_capture_kv_active=False,
    forward_stream=None,
    memory_pool_config=None,
    draft_model_idx=None,
    attn_dp_size=1,
    draft_parallel_layout=None,
    dflash_draft_cell_size_per_token=None,
    extra_mamba_cache_bytes_per_req=0,
    hybrid_kda_config=None,
    kv_shard_rank=None,
    kv_shard_size=1,
    kv_shard_spec=None,
    kv_shard_group=None,
    is_hybrid_swa_mtp_draft=False,
    draft_swa_full_capacity=False,
    is_inkling_mtp_draft=False,
)
