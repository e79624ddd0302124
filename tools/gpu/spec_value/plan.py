"""What a `run` starts and measures, decided before anything starts (pure): the models and the
stages, every server's flags, port and group, the defaults of each model, and the settings a
command line gives (configurations, batches, profiles, tokens, rounds), the run's folders."""
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Optional

from .. import spec_bench as bench
from ..spec_pair import TRAINED      # the training's record, in the pair dir beside drafter/


class Model(StrEnum):
    """`run --model`: the trained pair (SmolLM2 and its DFlash drafter) or the Qwen3.6-27B shape
    with dummy weights (the per-step cost at scale)."""
    PAIR = "pair"
    BIG = "27b"


class Stage(StrEnum):
    """`run --stage` of the pair: both halves in one call, or the training and the measurements
    in two calls on the same warm machine."""
    ALL = "all"
    TRAIN = "train"
    MEASURE = "measure"

    @property
    def trains(self):
        return self in (Stage.ALL, Stage.TRAIN)

    @property
    def measures(self):
        return self in (Stage.ALL, Stage.MEASURE)


class Group(StrEnum):
    """Which of the pair's starts a server belongs to: the AR server that answers the training
    prompts (started first, alone), or the configurations measured (started at once)."""
    ANSWERS = "answers"
    MEASURE = "measure"


PAIR_COMMON = ["--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch",
               "--disable-piecewise-cuda-graph", "--dtype", "bfloat16", "--context-length", "4096",
               "--mem-fraction-static", "0.85", "--max-total-tokens", "160000", "--disable-radix-cache",
               "--enable-metrics", "--log-level", "info", "--random-seed", "0"]
# every server of the pair runs beside the others: --max-total-tokens fixes each one's KV pool (SGLang's
# --mem-fraction-static alone sizes the pool from the free memory it finds, which the others take)
# a DFlash-family server (DFLASH, DDTREE) holds fresh prefills until min(4, max(2, (max running + 5) // 6))
# slots are free (the pin's managers/min_free_slots_delayer.py, on unless --min-free-slots-delay <= 1): at 32
# running requests and a closed loop of 32 a finished request's slot would wait for three more, so batch 32
# would run 28-32 at once; 1 turns the hold off, as AR (no delayer) runs
PAIR_SPEC = ["--max-running-requests", "32", "--cuda-graph-bs", "1", "2", "4", "8", "16", "32",
             "--min-free-slots-delay", "1"]
PAIR_AR = ["--max-running-requests", "128", "--cuda-graph-bs", "1", "2", "4", "8", "16", "32", "64", "128"]
BIG_COMMON = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
              "--mm-attention-backend", "triton_attn", "--sampling-backend", "pytorch", "--disable-piecewise-cuda-graph",
              "--context-length", "4096", "--page-size", "1", "--disable-radix-cache", "--mamba-scheduler-strategy",
              "no_buffer", "--max-running-requests", "4", "--cuda-graph-bs", "1", "2", "4", "--enable-metrics",
              "--log-level", "info", "--random-seed", "0"]
DEFAULTS = {Model.PAIR: {"configs": "AR,DFLASH,DDTREE-8,DDTREE-16,DDTREE-32,DDTREE-63", "batches": "1,4,16,32",
                         "max_new": 192, "profile": "AR,DFLASH,DDTREE-16,DDTREE-63", "rounds": 2},
            Model.BIG: {"configs": "AR,DFLASH,DDTREE-16", "batches": "1,4", "max_new": 128,
                        "profile": "AR,DFLASH,DDTREE-16", "rounds": 1}}
PORT = 30200
TRAIN_SERVER = bench.Config("AR", None)     # answers the training prompts (overlap off)


@dataclass(frozen=True)
class PlannedServer:
    """One server of the plan: its configuration, its own flags (after --model-path/--port/--host,
    before the common ones), its port and, for the pair, its group."""
    config: bench.Config
    flags: list
    port: int
    group: Optional[Group] = None


@dataclass(frozen=True)
class Settings:
    """What `run` measures, from its command line and its model's defaults."""
    model: Model
    stage: Stage
    configs: list           # bench.Config, in the order given
    batches: list           # int
    profile: list           # bench.Config profiled at batch 1 (none for --stage train)
    max_new: int
    rounds: int

    @property
    def one_at_a_time_default(self):
        return self.model is Model.BIG


def settings(args):
    """The Settings of `run`'s arguments (ValueError naming the option that cannot be used)."""
    model, stage = Model(args.model), Stage(args.stage)
    if model is not Model.PAIR and stage is not Stage.ALL:
        raise ValueError(f"--stage {stage}: the stages split the pair's run (its training, then its measurements); "
                         f"--model {model} trains nothing: leave --stage out (all)")
    d = DEFAULTS[model]
    cfgs = bench.parse_configs(args.configs or d["configs"])
    batches = [int(x) for x in (args.batches or d["batches"]).split(",")]
    if args.profile is None:        # the defaults that this run measures, with the overlap scheduler or without
        bases = {c.name for c in bench.parse_configs(d["profile"])}
        prof = [c for c in cfgs if bench.split_name(c.name)[0] in bases]
    else:
        prof = bench.parse_configs(args.profile)
        if [c for c in prof if c not in cfgs]:
            raise ValueError(f"--profile {args.profile}: {', '.join(c.name for c in prof if c not in cfgs)} "
                             f"not among the configurations measured ({', '.join(c.name for c in cfgs)}); "
                             "add it to --configs or leave it out of --profile")
    if stage is Stage.TRAIN:
        prof = []
    return Settings(model, stage, cfgs, batches, prof, args.max_new_tokens or d["max_new"], args.rounds or d["rounds"])


def file_name(config_name):
    """A configuration's name as one path component ('DDTREE-16/overlap' -> 'DDTREE-16+overlap')."""
    return config_name.replace("/", "+")


def common_flags(args, model):
    """Every server's own flags of `model`, with SGLang's --sleep-on-idle when asked (`run
    --sleep-on-idle`: an idle scheduler waits on its sockets instead of polling, so the pair's idle
    servers leave the CPU to the measured one)."""
    return (PAIR_COMMON if model is Model.PAIR else BIG_COMMON) + (["--sleep-on-idle"] if args.sleep_on_idle else [])


def launch_flags(flags, port, common):
    """What a server's command line has after --model-path/--port/--host: the common flags, its own,
    its NCCL port (parallel starts: no race for a free port)."""
    return list(common) + list(flags) + ["--nccl-port", str(port + 1000)]


def pair_servers(cfgs, stage, draft):
    """The pair's servers a stage starts, in order: the answering AR server (stages all, train:
    started first, alone), then every configuration measured (stages all, measure: started at
    once, the speculative ones first).  Stage all measures the answering AR server itself when AR
    is among the configurations; stage measure starts every configuration, AR too."""
    out = []
    if stage.trains:
        out.append(PlannedServer(TRAIN_SERVER, PAIR_AR + bench.spec_flags(TRAIN_SERVER, None), PORT, Group.ANSWERS))
    if stage.measures:
        started = {o.config.name for o in out}
        todo = [c for c in cfgs if c.speculative] + [c for c in cfgs if not c.speculative and c.name not in started]
        out += [PlannedServer(c, (PAIR_SPEC if c.speculative else PAIR_AR) + bench.spec_flags(c, draft), PORT + 1 + i,
                              Group.MEASURE)
                for i, c in enumerate(todo)]
    return out


def big_server(cfg, i, draft):
    """The 27B shape's server of configuration i (one at a time)."""
    return PlannedServer(cfg, bench.spec_flags(cfg, draft) + (["--speculative-dflash-block-size", "16"]
                                                              if cfg.speculative else []), PORT + i)


@dataclass(frozen=True)
class Places:
    """A run's folders: its report (out), the installed trees (work), the pair's files beside work
    (kept when work is installed anew: the joined target, the drafter and its record) and the
    folders --pair names (the parts prepare wrote)."""
    out: Path
    work: Path
    parts: tuple = ()

    @classmethod
    def of(cls, args):
        return cls(Path(args.out).resolve(), Path(args.work).resolve(),
                   tuple(Path(x) for x in args.pair.split(",")) if getattr(args, "pair", None) else ())

    @property
    def pair(self):
        return self.work.with_name(self.work.name + "-pair")

    @property
    def target(self):
        return self.pair / "target"

    @property
    def drafter(self):
        return self.pair / "drafter"

    @property
    def record(self):
        return self.pair / TRAINED
