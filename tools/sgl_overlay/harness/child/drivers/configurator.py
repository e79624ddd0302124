"""Era configurator (v0.5.16+): the real KVCacheConfigurator dataclass."""

from __future__ import annotations

import torch

from .. import loader, resolution
from ..standins import ModelConfigView, View
from ..code_cache import cached
from .context import Context, Untestable
from .inputs import runner_inputs
from .recorders import _install_pool_recorders, _wrap_configurator_factory


SPEC_AUX = "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"


def _spec_aux_config(ctx: Context, attrs: dict, draft_mc):
    """The runner's ``spec_aux_config``: the tree's own
    ``resolve_spec_aux_hidden_state_config`` (v0.5.16+; the drafter's DFLASH
    layer choice and its KV bytes per token), with ``ModelConfig.from_server_args``
    for the drafter answering the scenario's drafter."""
    spec = attrs["spec_algorithm"]
    if not ctx.exists(SPEC_AUX) or not getattr(spec, "is_dflash", lambda: False)() or draft_mc is None:
        return View("spec_aux_config", ctx.reads, dflash_draft_num_layers=attrs["dflash_draft_num_layers"],
                    draft_model_config=draft_mc if attrs["dflash_draft_num_layers"] else None,
                    dflash_draft_cell_size_per_token=None)
    for extra in (SPEC_AUX, "sglang.srt.mem_cache.kv_cache_dtype"):
        if ctx.exists(extra):
            loader.add_real(ctx.finder, extra)
    mod = ctx.load(SPEC_AUX)

    class _DraftModelConfig:  # only the drafter is built here (is_draft_model=True)
        @staticmethod
        def from_server_args(*a, **k):
            if not k.get("is_draft_model"):
                return attrs["model_config"]
            return draft_mc

    mod.ModelConfig = _DraftModelConfig
    import logging

    warnings = []

    class _Catch(logging.Handler):
        def emit(self, record):
            warnings.append(record.getMessage())

    handler = _Catch(logging.WARNING)
    logging.getLogger(mod.__name__).addHandler(handler)
    try:
        cfg = mod.resolve_spec_aux_hidden_state_config(
            server_args=attrs["server_args"], model_config=attrs["model_config"], spec_algorithm=spec,
            is_draft_worker=False)
    finally:
        logging.getLogger(mod.__name__).removeHandler(handler)
    for w in warnings:  # the release's own fallback (layer-count scaling) must not hide a harness gap
        if "Could not resolve DFLASH draft KV bytes" in w:
            raise Untestable(f"the release could not resolve the drafter's KV bytes per token here: {w}")
    ctx.figures["dflash_draft_cell_size_per_token"] = getattr(cfg, "dflash_draft_cell_size_per_token", None)
    return cfg


def memory_ledger(ledger) -> dict | None:
    """The tree's in-memory sizing ledger as a dict (a tree with the memory
    topic's v0.5.23 port keeps it on the configurator; the refusal carries it
    too), or None."""
    to_dict = getattr(ledger, "to_dict", None)
    return to_dict() if callable(to_dict) else None


MODEL_RUNNER = ("sglang", "srt", "model_executor", "model_runner.py")
KV_POOL_RUNTIME = ("sglang", "srt", "model_executor", "model_runner_components", "kv_pool_runtime.py")


def _runner_constructor_defaults(ctx: Context) -> dict:
    """The literal defaults of the release's ``ModelRunner.__init__`` keyword
    parameters (``is_draft_worker``, ``memory_pool_config``, ``draft_model_idx``,
    the pools ...): what the scheduler's target worker is built with."""
    import ast

    path = ctx.root.joinpath(*MODEL_RUNNER)

    def build():
        out = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not (isinstance(node, ast.ClassDef) and node.name == "ModelRunner"):
                continue
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):] + fn.args.kwonlyargs
                    defaults = list(fn.args.defaults) + list(fn.args.kw_defaults)
                    for arg, default in zip(args, defaults):
                        if default is None:
                            continue
                        try:
                            out[arg.arg] = ast.literal_eval(default)
                        except ValueError:
                            pass
        return out

    return cached(path, ("runner_init_defaults",), build)


PAGE_INTERLEAVE = ("sglang", "srt", "mem_cache", "page_interleave.py")
PAGE_SHARD_FUNCTIONS = ("make_page_shard_spec", "compute_page_shard_scratch_bytes", "get_kv_shard_group_info")


def _page_shard_functions(ctx: Context, accessors: dict, modules) -> None:
    """v0.5.22+: the release's own logical-page KV sharding functions
    (``mem_cache/page_interleave.py``: ``make_page_shard_spec``, the scratch
    bytes charged before sizing), on the resolved ``enable_kv_cache_sharding``
    read through ``get_parallel()``; bound in the sizing modules in place of
    their stand-ins (which the pool recorders would otherwise answer)."""
    path = ctx.root.joinpath(*PAGE_INTERLEAVE)
    if not path.is_file():
        return
    spec_info = ctx.load("sglang.srt.speculative.spec_info")
    ns = dict(accessors, SpeculativeAlgorithm=spec_info.SpeculativeAlgorithm, torch=torch)
    found = resolution.tree_functions(path, PAGE_SHARD_FUNCTIONS, ns)
    for mod in modules:
        for name, fn in found.items():
            if name in mod.__dict__:
                setattr(mod, name, fn)


def _release_configurator(ctx: Context, kmod, runner: View, accessors: dict):
    """The release's own ``ModelRunner.init_kv_cache_configurator`` on the
    runner's attributes: it chooses every field the configurator is built
    with (``post_capture_kv_active`` by its own ``is_post_capture_kv_active``,
    ``attn_dp_size`` and ``pp_size`` from the parallel layout, the dataclass's
    own defaults for what it leaves out), and the real constructor runs
    ``__post_init__``.  Returns the configurator."""
    import importlib

    ns = dict(accessors, KVCacheConfigurator=kmod.KVCacheConfigurator)
    path = ctx.root.joinpath(*KV_POOL_RUNTIME)
    if path.is_file():
        helpers = {"current_platform": View("current_platform", ctx.reads, is_cuda=lambda: True)}  # the scenario's GPU
        if ctx.exists("sglang.srt.arg_groups.overrides"):
            overrides = importlib.import_module("sglang.srt.arg_groups.overrides")
            if hasattr(overrides, "post_capture_kv_sizing_planned"):
                helpers["post_capture_kv_sizing_planned"] = overrides.post_capture_kv_sizing_planned
        ns.update(resolution.tree_functions(path, ["is_post_capture_kv_active"], helpers))
    name = "ModelRunner.init_kv_cache_configurator"
    init = resolution.tree_functions(ctx.root.joinpath(*MODEL_RUNNER), [name], ns).get(name)
    if init is None:
        raise Untestable(f"this tree's sglang/srt/model_executor/model_runner.py has no {name} the harness "
                         "can define (it builds the KVCacheConfigurator)")
    init(runner)
    return object.__getattribute__(runner, "kv_cache_configurator")


def drive(ctx: Context) -> dict:
    """Era configurator (v0.5.16+): the real KVCacheConfigurator dataclass.

    Built by the release's own ``ModelRunner.init_kv_cache_configurator``
    (``_release_configurator``) on the runner's attributes computed from the
    scenario; the real constructor runs its ``__post_init__``.  The runtime-context accessors that v0.5.17+
    read (``get_schedule()``, ``get_memory()`` ...) all return the server-args
    view, whose fields carry the same names.
    """
    for extra in ("sglang.srt.mem_cache.draft_kv_budget", "sglang.srt.configs.hybrid_arch",
                  "sglang.srt.mem_cache.layout.fused_draft",  # HOST_KINDS registry (v0.5.23)
                  "sglang.srt.mem_cache.allocation_sizing"):  # get_mamba_tracking_slots (v0.5.22+)
        if ctx.exists(extra):
            loader.add_real(ctx.finder, extra)
    kmod = ctx.load(ctx.layout.entry)
    _install_pool_recorders(kmod, ctx)
    pool_cfg = ctx.load("sglang.srt.model_executor.pool_configurator")
    _wrap_configurator_factory(pool_cfg, ctx)
    inputs = runner_inputs(ctx)
    attrs = inputs.attrs
    sa = attrs["server_args"]
    tp = attrs["tp_size"]
    mambaish = attrs["mambaish_config"]
    accessors = inputs.accessors
    model_fakes = {
        "mambaish_config": lambda mc: mambaish,
        "hybrid_gdn_config": lambda mc: mambaish,
        "hybrid_kda_config": lambda mc: None,
    }
    loader.set_fakes(accessors)
    loader.set_fakes(model_fakes)
    for mod in (kmod, pool_cfg):
        for name, fake in {**accessors, **model_fakes}.items():
            if name in mod.__dict__:
                setattr(mod, name, fake)
    _page_shard_functions(ctx, accessors, (kmod, pool_cfg))
    draft = ctx.req.get("draft") or {}
    draft_mc = None
    if draft:
        draft_mc = ModelConfigView(
            "draft_model_config", ctx.reads, num_key_value_heads=draft["num_key_value_heads"],
            head_dim=draft["head_dim"], v_head_dim=draft["head_dim"], num_hidden_layers=draft["num_hidden_layers"],
            num_attention_layers=draft["num_hidden_layers"], is_hybrid_swa=False, attention_arch="MHA",
            dtype=attrs["model_config"].dtype,  # the drafter checkpoint's dtype: the target's (bf16)
            hf_config=View("draft_hf_config", ctx.reads, architectures=["DFlashDraftModel"],
                           num_hidden_layers=draft["num_hidden_layers"], block_size=draft.get("block_size")),
        )
    mc = attrs["model_config"]
    layer_ids = list(mc.full_attention_layer_ids)
    runner = dict(attrs)
    runner.update(_runner_constructor_defaults(ctx))  # a target worker: the constructor's defaults
    runner.update(
        ps=View("ps", ctx.reads, attn_dp_size=1, attn_tp_size=tp, attn_cp_size=1, attn_dcp_size=1, pp_size=1,
                tp_size=tp, moe_dp_size=1, tp_rank=0, pp_rank=0),
        # get_pp_group() on one node: a group of one
        pp_group=View("pp_group", ctx.reads, world_size=1, rank_in_group=0, is_first_rank=True, is_last_rank=True),
        # a CUDA stream the pools wait on when they free; nothing in the sizing reads it (a read is named)
        forward_stream=View("forward_stream", ctx.reads),
        spec_aux_config=_spec_aux_config(ctx, attrs, draft_mc),
        layer_info=View("layer_info", ctx.reads, start_layer=0, end_layer=attrs["end_layer"],
                        num_effective_layers=attrs["num_effective_layers"], full_attention_layer_ids=layer_ids,
                        swa_attention_layer_ids=[], is_hybrid_swa_mtp_draft=False,
                        num_attention_layers=len(layer_ids)),
        # v0.5.17+: ModelRunner sets it to the resolved kv_cache_dtype (get_model().kv_cache_dtype)
        kv_cache_dtype_str=sa.kv_cache_dtype,
    )
    kvc = _release_configurator(ctx, kmod, View("runner", ctx.reads, **runner), accessors)
    cls = type(kvc)
    if getattr(kvc, "dflash_draft_cell_size_per_token", None) is not None:  # v0.5.23: the configurator's own
        ctx.figures["dflash_draft_cell_size_per_token"] = kvc.dflash_draft_cell_size_per_token
    for name, key in (("_profile_available_bytes", "available_bytes"),
                      ("_handle_max_mamba_cache", "rest_after_mamba_gib"),
                      ("resolve_max_num_reqs", "resolved_max_num_reqs")):
        fn = getattr(cls, name, None)
        if fn is None:
            continue

        def wrapper(self, *a, __fn=fn, __key=key, **k):
            out = __fn(self, *a, **k)
            if not getattr(self, "memory_dry_run", False):  # the memory topic's remedy searches: not the run
                ctx.figures[__key] = out
                if __key == "rest_after_mamba_gib":  # its input too
                    ctx.figures["rest_before_mamba_gib"] = a[0] if a else k.get("total_rest_memory")
            return out

        # on the class (a slots dataclass takes no per-instance override); this
        # child process builds one configurator
        setattr(cls, name, wrapper)
    try:
        cfg = kvc._resolve_memory_pool_config(ctx.pre_load)
    finally:
        ctx.ledger = memory_ledger(getattr(kvc, "memory_ledger", None))
    ctx.figures["max_total_num_tokens"] = cfg.max_total_num_tokens
    ctx.figures["max_running_requests"] = cfg.max_running_requests
    ctx.figures["entry"] = "KVCacheConfigurator._resolve_memory_pool_config"
    ctx.figures["max_mamba_cache_size"] = sa.max_mamba_cache_size if mambaish is not None else None
    if ctx.req.get("measure_allocation"):
        from .. import allocation

        ctx.figures["allocation"] = allocation.measure_configurator(ctx, kvc, cfg, kmod)
    return ctx.figures
