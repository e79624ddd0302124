"""An offline bundle for a GPU machine without a network: the patched wheel
for that machine's Python plus the runtime wheels SGLang imports for one
configuration, within a size budget (docs/bundle.md).

``choose`` is the decision, a pure function of the candidates, their sizes,
the budget and the configuration; ``build`` downloads the candidates with
``python -m pip download --no-deps`` (pip's own configuration decides the
index), makes the slim variants, calls ``choose`` and writes the bundle and
its manifest.
"""
import dataclasses
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name
from wheel.wheelfile import WheelFile

from . import archive, versions
from .errors import OverlayError

MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Variant:
    label: str                  # "full", "slim"
    size: int                   # bytes of the wheel file
    disables: str = ""          # what is missing with this variant ("" for the full wheel)
    requires: tuple = ()        # (flag, value) pairs the configuration must have for this variant to serve


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    variants: tuple             # preferred first
    required: bool = True       # False: the bundle may leave it out
    why: str = ""               # what SGLang needs it for
    disables: str = ""          # what leaving it out disables (optional candidates)


def choose(candidates, budget, config):
    """Which candidates go into a bundle of at most ``budget`` bytes for the
    configuration ``config`` (``{flag: value}``, e.g. ``{"attention-backend":
    "triton"}``).  Required candidates are placed first, in the given order,
    then optional ones, in the given order; each takes its first variant
    that serves the configuration and fits what is left.  Where that leaves a
    required candidate out, the slim variant (a later one) of the first
    required candidate that took its full one is preferred, and so on in
    order, until every required candidate is placed or none is left to slim.

    Returns ``{"fits", "total", "budget", "chosen": [{name, variant, size,
    disables}], "left_out": [{name, reason, disables, required}]}``;
    ``fits`` is False when a required candidate could not be placed."""
    slimmed = {}
    while True:
        d = _place(candidates, budget, config, slimmed)
        if d["fits"]:
            return d
        took_first = [c for c in candidates if c.required and c.name not in slimmed and len(c.variants) > 1
                      and any(x["name"] == c.name and x["variant"] == c.variants[0].label for x in d["chosen"])]
        if not took_first:
            return d
        slimmed[took_first[0].name] = (f"a required wheel did not fit with it "
                                       f"({', '.join(x['name'] for x in d['left_out'] if x['required'])})")


def _place(candidates, budget, config, slimmed):
    """One placement (``choose``); ``slimmed``: {name: why} of candidates whose first variant is passed over."""
    left = budget
    chosen, left_out = [], []
    order = [c for c in candidates if c.required] + [c for c in candidates if not c.required]
    for c in order:
        reasons = []
        pick = None
        for i, v in enumerate(c.variants):
            unmet = [(f, val) for f, val in v.requires if config.get(f) != val]
            if unmet:
                reasons.append(f"{v.label} needs " + ", ".join(f"--{f} {val}" for f, val in unmet))
                continue
            if v.size > left:
                reasons.append(f"{v.label} is {v.size / MIB:.1f} MiB, {left / MIB:.1f} MiB left")
                continue
            if i == 0 and c.name in slimmed and len(c.variants) > 1:
                reasons.append(f"{v.label} is {v.size / MIB:.1f} MiB; " + slimmed[c.name])
                continue
            pick = v
            break
        if pick is None:
            left_out.append({"name": c.name, "required": c.required, "reason": "; ".join(reasons) or "no variant",
                             "disables": c.disables or c.why})
            continue
        left -= pick.size
        chosen.append({"name": c.name, "variant": pick.label, "size": pick.size, "disables": pick.disables})
        for v in c.variants[:c.variants.index(pick)]:
            left_out.append({"name": f"{c.name} ({v.label})", "required": False,
                             "reason": reasons[c.variants.index(v)],
                             "disables": pick.disables})
    return {"fits": not any(x["required"] for x in left_out), "total": budget - left, "budget": budget,
            "chosen": chosen, "left_out": left_out}


# --------------------------------------------------------------------------
# what a GPU machine with torch 2.11, triton, numpy and safetensors lacks to
# start SGLang 0.5.12.post1 with --skip-tokenizer-init: the set that started
# servers on an H200 with Python 3.12 (docs/results/gpu.md).  Versions: the release's
# own pins where it pins (upstream.lock [dependencies]), else ones known to work
# with those pins.

PROVIDED = ("torch", "triton", "numpy", "safetensors")

# the versions the GPU machine has of what it provides and a release may pin
# (its records: "torch": "2.11.0+cu130"; torch 2.11.0 itself pins triton==3.6.0)
MACHINE = {"torch": "2.11.0", "triton": "3.6.0"}

RUNTIME = [
    # name, requirement, why
    ("sglang-kernel", "sglang-kernel=={sglang-kernel}", "SGLang's CUDA kernels"),
    ("flashinfer-python", "flashinfer-python=={flashinfer_python}", "sampling and attention kernels"),
    ("transformers", "transformers=={transformers}", "model configs"),
    ("tokenizers", "tokenizers==0.22.2", "transformers 5.6.0 rejects tokenizers > 0.23"),
    ("apache-tvm-ffi", "apache-tvm-ffi==0.1.9", "flashinfer's FFI (the release's pin)"),
    ("pydantic", "pydantic==2.14.4", "API models"),
    ("pydantic-core", "pydantic-core==2.50.5", "pydantic"),
    ("annotated-types", "annotated-types", "pydantic"),
    ("typing-inspection", "typing-inspection", "pydantic"),
    ("fastapi", "fastapi==0.165.0", "the HTTP server"),
    ("starlette", "starlette==1.10.0", "fastapi"),
    ("uvicorn", "uvicorn==0.54.0", "the HTTP server"),
    ("python-multipart", "python-multipart", "fastapi forms"),
    ("opentelemetry-api", "opentelemetry-api", "tracing hooks imported at start"),
    ("pyzmq", "pyzmq", "inter-process queues"),
    ("orjson", "orjson", "responses"),
    ("msgspec", "msgspec", "inter-process messages"),
    ("pybase64", "pybase64", "request decoding"),
    ("setproctitle", "setproctitle", "process names"),
    ("partial-json-parser", "partial-json-parser", "function-call parsing (imported at start)"),
    ("dill", "dill", "imported at start"),
    ("compressed-tensors", "compressed-tensors==0.20.1", "quantization configs (imported at start)"),
    ("loguru", "loguru", "imported at start"),
    ("gguf", "gguf", "model loader (imported at start)"),
    ("openai", "openai==2.6.1", "the OpenAI-compatible API (the release's pin)"),
    ("jiter", "jiter", "openai"),
    ("distro", "distro", "openai"),
    ("sniffio", "sniffio", "openai"),
    ("jsonschema", "jsonschema", "structured output (imported at start)"),
    ("jsonschema-specifications", "jsonschema-specifications", "jsonschema"),
    ("referencing", "referencing", "jsonschema"),
    ("rpds-py", "rpds-py", "jsonschema"),
    ("soundfile", "soundfile==0.13.1", "audio inputs (imported at start; the release's pin)"),
    ("cffi", "cffi", "soundfile"),
    ("pycparser", "pycparser", "cffi"),
]

# what tools/gpu/e2e_install.py replaces by an import-only stub when the bundle leaves
# it out and the machine has none: imported at module level on the server's
# start path, used only for what the checks never send (audio inputs).  Such
# wheels are placed last, and only if they fit.
STUBBABLE = {"soundfile", "cffi", "pycparser"}

# A release wheel's members that the server never imports at start, dropped by
# --slim-release to fit a call's budget: the diffusion runtime (imported only by
# sglang/jit_kernel/diffusion and sglang/kernels/ops/diffusion), the gRPC
# module with its compiled _core (imported by nothing else in the tree), and
# from v0.5.17 two more compiled modules: the embedded Rust HTTP server
# (sglang/srt/server/_core, 13 MB, imported by managers/rust_server.py only
# when SGLANG_RUST_SERVER is set) and the Rust image processor of the Inkling
# model (sglang/srt/multimodal/_core, imported inside its processor).
RELEASE_SLIM_DROP = ("sglang/multimodal_gen/*", "sglang/srt/grpc/*", "sglang/srt/server/_core*",
                     "sglang/srt/multimodal/_core*")

def runtime_requirements(deps):
    """The requirement of each ``RUNTIME`` wheel for a release whose own pins
    are ``deps`` (``{name: version}``: upstream.lock [dependencies] for the
    pin, ``versions.pins`` of another release's METADATA): the release's pin
    where it pins that name, else RUNTIME's."""
    pinned = {canonicalize_name(k): v for k, v in deps.items()}
    out = []
    for name, spec, _ in RUNTIME:
        v = pinned.get(canonicalize_name(name))
        if v:
            out.append(f"{name}=={v}")
            continue
        try:
            out.append(spec.format(**deps))
        except KeyError as e:
            raise OverlayError(f"the release does not pin {e.args[0]}, which bundle.RUNTIME needs for {name}",
                               hint="give the version in bundle.RUNTIME for this release") from None
    return out


def release_blockers(metadata, tags, machine):
    """What stops a release (its wheel's METADATA text, for the platform
    ``tags``) from running on a machine that provides ``machine``
    (``{name: version}``, e.g. ``MACHINE``): one ``{name, requires, machine}``
    for each of those packages whose requirement the machine's version does
    not satisfy.  The machine's packages are not in the bundle, so a
    release pinning another torch cannot be bundled for it."""
    have = {canonicalize_name(k): (k, v) for k, v in machine.items()}
    out = []
    for req in versions.requirements(metadata, tags):
        name, version = have.get(canonicalize_name(req.name), (None, None))
        if name and not req.specifier.contains(version, prereleases=True):
            out.append({"name": name, "requires": str(req), "machine": version})
    return out


# sglang-kernel's wheel is 322 MB because of FA3; without these members it is
# about 16 MiB and `import sgl_kernel` works (flash_ops is imported only by
# sgl_kernel.flash_attn).
# (from 0.4.6.post1 also infllm_ops, loaded only by sgl_kernel.infllm_v2's
# functions: 6.8 MiB).
KERNEL_SLIM_DROP = ("sgl_kernel/flash_ops*.so", "sgl_kernel/sm100/*", "sgl_kernel/flashmla_ops*.so",
                    "*mscclpp*", "sgl_kernel/infllm_ops*.so")
KERNEL_SLIM_DISABLES = ("FA3/FA4 attention (sgl_kernel.flash_ops), the sm100 (Blackwell datacenter) kernels, "
                        "FlashMLA and mscclpp all-reduce: use --attention-backend triton (and for Qwen3.5 "
                        "--mm-attention-backend triton_attn)")
KERNEL_SLIM_INFLLM = "; also InfLLM-V2 sparse attention (sgl_kernel.infllm_v2)"

# flashinfer-python ships the sources its JIT compiles; CUTLASS's headers (5.5 MiB
# of 14.3 in 0.6.15.post1) serve only its GEMM, MoE and attention kernels.  Its
# sampling kernels (sampling.cuh: cub and its own headers, both kept) still
# build, and greedy requests never compile them (SGLang takes the argmax).
FLASHINFER_SLIM_DROP = ("flashinfer/data/cutlass/*",)
FLASHINFER_SLIM_DISABLES = ("flashinfer's CUTLASS-based JIT kernels (its attention, GEMM and MoE backends): use "
                            "--attention-backend triton")


def kernel_slim_disables(kernel_wheel):
    """What the slim copy of this sglang-kernel wheel lacks (InfLLM-V2 only where the wheel has it)."""
    with zipfile.ZipFile(kernel_wheel) as z:
        infllm = any(fnmatch.fnmatch(n, "sgl_kernel/infllm_ops*.so") for n in z.namelist())
    return KERNEL_SLIM_DISABLES + (KERNEL_SLIM_INFLLM if infllm else "")


def dropped(path, drop):
    """Whether the wheel member ``path`` is one that ``drop`` (fnmatch patterns) leaves out."""
    return any(fnmatch.fnmatch(path, pat) for pat in drop)


def slim_wheel(src, dest_dir, drop, label="slim"):
    """A copy of the wheel ``src`` without the members matching ``drop``,
    its version given the local label ``+<label>`` (it is not the published
    file; ``.<label>`` after a local version it has, as the patched wheel's
    ``+overlay.<hash>``), RECORD rewritten by WheelFile.  Returns the new path."""
    src = Path(src)
    name, version, tags = versions.wheel(src.name)
    new_version = f"{version}{'.' if '+' in version else '+'}{label}"
    out = Path(dest_dir) / f"{name}-{new_version}-{tags}.whl"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{new_version}.dist-info/"
    with zipfile.ZipFile(src) as z, WheelFile(out, "w") as w:
        for info in z.infolist():
            n = info.filename
            if info.is_dir() or dropped(n, drop) or n == old_info + "RECORD":
                continue
            data = z.read(info)
            if n.startswith(old_info):
                if n == old_info + "METADATA":
                    data = re.sub(rb"(?m)^Version: .*$", b"Version: " + new_version.encode(), data, count=1)
                n = new_info + n[len(old_info):]
            zi = zipfile.ZipInfo(n, date_time=info.date_time)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = info.external_attr
            w.writestr(zi, data)
    return out


# the runtime wheels with a slim variant (for --attention-backend triton): what
# each drops, and what that disables (a function of the full wheel)
SLIMMABLE = {
    "sglang-kernel": (KERNEL_SLIM_DROP, kernel_slim_disables),
    "flashinfer-python": (FLASHINFER_SLIM_DROP, lambda wheel: FLASHINFER_SLIM_DISABLES),
}


def _download(requirements, dest, python, platform):
    tag = "cp" + python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
           "--only-binary=:all:", "--implementation", "cp", "--python-version", python, "--abi", tag,
           "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    plats = [platform]
    if m:   # every manylinux tag the platform accepts, newest first
        major, minor, arch = int(m[1]), int(m[2]), m[3]
        plats = [f"manylinux_{major}_{n}_{arch}" for n in range(minor, 16, -1)] + [f"manylinux2014_{arch}"]
    for p in plats + ["any"]:
        cmd += ["--platform", p]
    p = subprocess.run(cmd + list(requirements), capture_output=True, text=True)
    if p.returncode != 0:
        raise OverlayError(f"pip could not download the runtime wheels: {p.stderr.strip()[-2000:]}",
                           hint="check that pip can reach your package index (pip config list)")


def _find(dl, name):
    norm = name.replace("-", "_").lower()
    for f in sorted(Path(dl).glob("*.whl")):
        if f.name.split("-")[0].lower() == norm:
            return f
    return None


def release_delta(release_wheel, patched_wheel, out, drop=()):
    """A small zip from which the release's own ``sglang/`` is rebuilt out of
    an installed patched wheel: the release's version of every file the
    patched wheel changes, the list of files it adds, and the release's
    published RECORD (every file's sha256) to prove the rebuilt tree exact.
    ``drop``: the members a slim patched wheel left out (``RELEASE_SLIM_DROP``),
    left out of the release's side too; the RECORD still lists them and the
    install proves them absent."""
    with zipfile.ZipFile(release_wheel) as r, zipfile.ZipFile(patched_wheel) as p:
        rel = {i.filename: i for i in r.infolist()
               if i.filename.startswith("sglang/") and not i.is_dir() and not dropped(i.filename, drop)}
        pat = {i.filename: i for i in p.infolist() if i.filename.startswith("sglang/") and not i.is_dir()}
        record = next(n for n in r.namelist() if n.endswith(".dist-info/RECORD"))
        changed = sorted(n for n in rel if n in pat and r.read(n) != p.read(n))
        added = sorted(set(pat) - set(rel))
        removed = sorted(set(rel) - set(pat))
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for n in changed + removed:
                z.writestr("files/" + n, r.read(n))
            z.writestr("added.txt", "".join(a + "\n" for a in added))
            z.writestr("RECORD", r.read(record))
    return {"changed": changed, "added": added, "removed": removed}


def _candidates(deps, dl_dir, python, platform, say):
    """The RUNTIME wheels for a release pinning ``deps``, downloaded into
    ``dl_dir`` where missing (the sglang-kernel also slimmed): (candidates,
    {(name, variant): file})."""
    dl_dir.mkdir(parents=True, exist_ok=True)
    reqs = runtime_requirements(deps)
    missing = [r for (name, _, _), r in zip(RUNTIME, reqs) if _find(dl_dir, name) is None]
    if missing:
        say(f"downloading {len(missing)} runtime wheel(s) with pip")
        _download(missing, dl_dir, python, platform)
    variants, files = {}, {}
    for name, _, _ in RUNTIME:
        f = _find(dl_dir, name)
        if f is None:
            raise OverlayError(f"pip did not fetch {name}", hint="check the package index")
        variants[name] = [Variant("full", f.stat().st_size)]
        files[(name, "full")] = f
        if name in SLIMMABLE:
            drop, disables = SLIMMABLE[name]
            slim_dir = dl_dir / "slim"
            slim_dir.mkdir(exist_ok=True)
            wname, version, _ = versions.wheel(f.name)
            s = next(iter(slim_dir.glob(f"{wname}-{version}+slim-*.whl")), None) or slim_wheel(f, slim_dir, drop)
            variants[name].append(Variant("slim", s.stat().st_size, disables(f),
                                          requires=(("attention-backend", "triton"),)))
            files[(name, "slim")] = s
    return runtime_candidates(variants), files


def runtime_candidates(variants):
    """The ``Candidate`` of each RUNTIME wheel, in RUNTIME's order, from
    ``{name: [Variant, ...]}``: required but for STUBBABLE ones."""
    return [Candidate(name, tuple(variants[name]), name not in STUBBABLE, why) for name, _, why in RUNTIME]


def _decide_and_write(cands, files, first_wheel, fixed, out, budget, config, manifest):
    """``choose`` within what ``fixed`` bytes (the sglang wheel and what
    comes with it) leave of ``budget``; when it fits, the wheels
    (``first_wheel`` and the chosen) are copied to ``out`` and bundle.json
    is written with ``manifest`` added."""
    decision = choose(cands, budget - fixed, config)
    decision["budget"] = budget
    decision["total"] += fixed
    if not decision["fits"]:
        return decision
    for f in out.glob("*.whl"):
        f.unlink()
    shutil.copy2(first_wheel, out)
    for c in decision["chosen"]:
        shutil.copy2(files[(c["name"], c["variant"])], out)
        c["file"] = files[(c["name"], c["variant"])].name
    decision.update({"config": config, "provided": list(PROVIDED), **manifest})
    (out / "bundle.json").write_text(json.dumps(decision, indent=1) + "\n")
    return decision


def _slimmed(wheel, dest, manifest):
    """``wheel`` without ``RELEASE_SLIM_DROP``, made in ``dest``; the manifest lists what was dropped."""
    Path(dest).mkdir(parents=True, exist_ok=True)
    manifest["release_slim_dropped"] = list(RELEASE_SLIM_DROP)
    return slim_wheel(wheel, dest, RELEASE_SLIM_DROP)


def build(lock, patched_wheel, release_wheel, out, python, platform, config, budget, dl_dir, progress=None,
          slim_release=False):
    """The pin's bundle: the patched wheel, the delta that rebuilds the
    release's own tree from it (``release_delta``) and the runtime wheels.
    ``slim_release``: the patched wheel without ``RELEASE_SLIM_DROP`` (its
    version ``+overlay.<hash>.slim``), the delta taken between the release
    and that wheel with the same members left out of both."""
    say = progress or (lambda m: None)
    out, dl_dir, patched_wheel = Path(out), Path(dl_dir), Path(patched_wheel)
    cands, files = _candidates(lock.dependencies, dl_dir, python, platform, say)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"python": python, "platform": platform}
    if slim_release:
        patched_wheel = _slimmed(patched_wheel, patched_wheel.parent / "slim", manifest)
    delta = out / "sglang-release-delta.zip"
    d = release_delta(release_wheel, patched_wheel, delta, manifest.get("release_slim_dropped", ()))
    fixed = patched_wheel.stat().st_size + delta.stat().st_size
    return _decide_and_write(cands, files, patched_wheel, fixed, out, budget, config, {
        **manifest, "patched_wheel": patched_wheel.name, "release_wheel": Path(release_wheel).name,
        "release_delta": {"file": delta.name, **{k: len(v) for k, v in d.items()}}})


def build_pristine(release_wheel, out, python, platform, config, budget, dl_dir, machine=MACHINE, progress=None,
                   slim_release=False):
    """A bundle of another release without our stack: its own wheel and the
    RUNTIME wheels at its own pins.  Refused (OverlayError, exit 1) when the
    release requires another version of what the machine provides
    (``release_blockers``): those are not bundled.  ``slim_release``: the
    release's wheel without ``RELEASE_SLIM_DROP`` (local version ``+slim``;
    bundle.json lists what was dropped)."""
    say = progress or (lambda m: None)
    out, dl_dir, release_wheel = Path(out), Path(dl_dir), Path(release_wheel)
    meta = archive.release_metadata(release_wheel)
    name, version, tags = versions.wheel(release_wheel.name)
    blockers = release_blockers(meta, tags, machine)
    if blockers:
        raise OverlayError(
            f"sglang {version} cannot run on the GPU machine: " + "; ".join(
                f"it requires {b['requires']} (Requires-Dist of {release_wheel.name}), the machine has "
                f"{b['name']} {b['machine']}" for b in blockers),
            hint="the machine's " + ", ".join(b["name"] for b in blockers) + " cannot come in a bundle; on a "
                 "machine image that has the release's versions, pass them with --machine NAME==VERSION "
                 "(docs/bundle.md, 'Another release')",
            details={"blockers": blockers})
    cands, files = _candidates(versions.pins(meta, tags), dl_dir, python, platform, say)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sglang-release-delta.zip").unlink(missing_ok=True)
    manifest = {"python": python, "platform": platform, "release": version, "patched_wheel": None,
                "machine": dict(machine)}
    if slim_release:
        release_wheel = _slimmed(release_wheel, dl_dir / "slim", manifest)
    manifest["release_wheel"] = release_wheel.name
    return _decide_and_write(cands, files, release_wheel, release_wheel.stat().st_size, out, budget, config, manifest)
