"""The KV-cache dtype names the harness maps to torch dtypes.  (The ServerArgs
field defaults come from each release's own ServerArgs: resolution.py.)"""
import torch

KV_DTYPES = {
    "auto": None,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
