"""The fast engine's frozen image tower in half precision (OpenAI's CLIP runs its weights in fp16
on the GPU; TPT does too), with the patch embedding as a reshape + matrix product.

Under fp16 autocast the fp32 tower casts its weights to fp16 on every call and every LayerNorm
writes an fp32 output that is cast back to fp16 (open_clip casts the residual stream to the input
dtype): copies and casts that a tower *stored* in fp16 never makes. The maths is the same (the
matrix products see the same fp16 operands; LayerNorm weights are rounded to fp16), so results
differ from the autocast tower by fp16 rounding only.

The patch embedding is a convolution with stride = kernel and no padding, i.e. a matrix product
of the flattened patches with the flattened kernel; cuDNN runs it in a slow generic kernel for
this shape, cuBLAS in a tensor-core GEMM. What both changes buy:
``benchmarks/README.md#fast-engine-knobs`` (``HALF_IMAGE``).

QuickGELU, ``h·σ(1.702h)``, runs eagerly as three element-wise passes over the widest activation
of every block (``[views·tokens, 4·width]``); :class:`SiluMLP` folds its 1.702 into the
neighbouring weights so one SiLU pass does it (``TTA.FAST.FOLD_QUICKGELU``).
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchEmbedMatmul(nn.Module):
    """Drop-in for ``nn.Conv2d(C, D, kernel_size=p, stride=p)``: [N, C, H, W] → [N, D, H/p, W/p]."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        k, s = tuple(conv.kernel_size), tuple(conv.stride)
        if k != s or k[0] != k[1] or any(conv.padding) or conv.groups != 1 \
                or tuple(conv.dilation) != (1, 1):
            raise ValueError(f"PatchEmbedMatmul needs a square, non-overlapping, unpadded patch "
                             f"convolution, got {conv}")
        self.p = int(k[0])
        self.in_channels = conv.in_channels
        self.weight = nn.Parameter(conv.weight.detach().reshape(conv.out_channels, -1).clone(),
                                   requires_grad=False)
        self.bias = (nn.Parameter(conv.bias.detach().clone(), requires_grad=False)
                     if conv.bias is not None else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C, H, W = x.shape
        p = self.p
        gh, gw = H // p, W // p
        if gh * p != H or gw * p != W:   # the convolution drops the remainder; so do we
            x = x[:, :, :gh * p, :gw * p]
        x = x.reshape(N, C, gh, p, gw, p).permute(0, 2, 4, 1, 3, 5).reshape(N, gh * gw, C * p * p)
        y = F.linear(x, self.weight, self.bias)                     # [N, gh*gw, D]
        return y.transpose(1, 2).reshape(N, -1, gh, gw)             # a view (no copy)


QUICKGELU = 1.702


def is_quick_gelu(act: nn.Module) -> bool:
    """Whether ``act`` computes QuickGELU, ``x·σ(1.702x)`` (open_clip's and OpenAI's), checked on
    numbers rather than by class name."""
    if isinstance(act, (nn.GELU, nn.SiLU, nn.ReLU, nn.Identity)) or list(act.parameters()):
        return False
    x = torch.linspace(-6, 6, 97, dtype=torch.float64)
    try:
        with torch.no_grad():
            y = act(x)
    except Exception:
        return False
    return torch.allclose(y, x * torch.sigmoid(QUICKGELU * x), rtol=1e-12, atol=1e-12)


class SiluMLP(nn.Module):
    """open_clip's MLP ``c_proj(QuickGELU(c_fc(x)))`` with QuickGELU's 1.702 folded into the
    weights: ``QuickGELU(h) = silu(1.702·h) / 1.702``, so it runs as
    ``c_proj'(silu(c_fc'(x)))`` with ``c_fc' = 1.702·c_fc`` (weight and bias) and
    ``c_proj'.weight = c_proj.weight / 1.702``: one element-wise kernel (SiLU, in place, computed
    in fp32 inside) instead of three (scale, sigmoid, product). The same function in exact
    arithmetic; the folded weights are computed in the tower's fp32 and rounded once to its
    dtype, so in fp16 results differ by fp16 rounding."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        fc, proj = mlp.c_fc, mlp.c_proj
        a = QUICKGELU
        self.w1 = nn.Parameter(fc.weight.detach() * a, requires_grad=False)
        self.b1 = (nn.Parameter(fc.bias.detach() * a, requires_grad=False)
                   if fc.bias is not None else None)
        self.w2 = nn.Parameter(proj.weight.detach() / a, requires_grad=False)
        self.b2 = (nn.Parameter(proj.bias.detach().clone(), requires_grad=False)
                   if proj.bias is not None else None)

    @staticmethod
    def supports(mlp: nn.Module) -> bool:
        return (isinstance(mlp, nn.Sequential) and len(mlp) == 3
                and all(isinstance(getattr(mlp, k, None), nn.Linear) for k in ("c_fc", "c_proj"))
                and hasattr(mlp, "gelu") and is_quick_gelu(mlp.gelu))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(x, self.w1, self.b1), inplace=True), self.w2, self.b2)


class LeanBlock(nn.Module):
    """An open_clip ``ResidualAttentionBlock`` (self-attention, batch-first, no mask) run as
    ``x + out(SDPA(qkv(ln_1 x))); x + mlp(ln_2 x)`` with the block's own weights: the fused QKV
    projection, ``F.scaled_dot_product_attention`` (flash on CUDA in fp16) and no
    ``nn.MultiheadAttention`` dispatch (its fast path is not taken under ``torch.compile``). The
    same maths; only the attention kernel's rounding differs."""

    def __init__(self, blk: nn.Module):
        super().__init__()
        self.ln_1, self.ln_2, self.mlp = blk.ln_1, blk.ln_2, blk.mlp
        self.ls_1, self.ls_2 = blk.ls_1, blk.ls_2
        a = blk.attn
        self.heads = int(a.num_heads)
        self.in_w, self.in_b = a.in_proj_weight, a.in_proj_bias
        self.out = a.out_proj

    @staticmethod
    def supports(blk: nn.Module) -> bool:
        a = getattr(blk, "attn", None)
        return (isinstance(a, nn.MultiheadAttention) and getattr(a, "batch_first", False)
                and getattr(a, "_qkv_same_embed_dim", False) and a.in_proj_weight is not None
                and not hasattr(blk, "ln_1_kv") and all(hasattr(blk, k) for k in (
                    "ln_1", "ln_2", "mlp", "ls_1", "ls_2")))

    def forward(self, x: torch.Tensor, attn_mask=None, **_) -> torch.Tensor:
        if attn_mask is not None:
            raise ValueError("LeanBlock runs unmasked (image) attention only")
        return self.__dict__.get("block_fn", lean_block)(self, x)


def lean_block(blk: LeanBlock, x: torch.Tensor) -> torch.Tensor:
    """One :class:`LeanBlock` on ``x`` [N, L, D] (a free function: :func:`compile_blocks` compiles
    it once for every block)."""
    N, L, D = x.shape
    qkv = F.linear(blk.ln_1(x), blk.in_w, blk.in_b)
    q, k, v = qkv.view(N, L, 3, blk.heads, D // blk.heads).permute(2, 0, 3, 1, 4)
    o = F.scaled_dot_product_attention(q, k, v)                          # [N, H, L, d]
    x = x + blk.ls_1(blk.out(o.transpose(1, 2).reshape(N, L, D)))
    return x + blk.ls_2(blk.mlp(blk.ln_2(x)))


def compile_blocks(tower: nn.Module, **compile_kw) -> nn.Module:
    """``tower`` with its :class:`LeanBlock` s run through one ``torch.compile`` of
    :func:`lean_block` (the blocks share its code and shapes: one compilation, not the whole
    tower's); the stem and head stay eager. A tower without lean blocks is compiled whole."""
    blocks = getattr(getattr(tower, "transformer", None), "resblocks", None)
    if not blocks or not all(isinstance(b, LeanBlock) for b in blocks):
        return torch.compile(tower, dynamic=False, **compile_kw)
    fn = torch.compile(lean_block, dynamic=False, **compile_kw)
    for b in blocks:
        b.__dict__["block_fn"] = fn
    return tower


def fast_image_tower(visual: nn.Module, dtype: torch.dtype = torch.float16,
                     patch_matmul: bool = True, lean_blocks: bool = True,
                     fold_gelu: bool = True) -> nn.Module:
    """A frozen copy of ``model.visual`` stored in ``dtype``, its patch convolution replaced by
    :class:`PatchEmbedMatmul` where it is one, its attention blocks by :class:`LeanBlock`
    where they have open_clip's form and (``fold_gelu``) its QuickGELU MLPs by :class:`SiluMLP`.
    Call it on inputs of ``dtype`` without autocast."""
    v = copy.deepcopy(visual)
    blocks = getattr(getattr(v, "transformer", None), "resblocks", None)
    if fold_gelu and blocks is not None:   # folded in fp32, before the cast to ``dtype``
        for b in blocks:
            if SiluMLP.supports(getattr(b, "mlp", None)):
                b.mlp = SiluMLP(b.mlp)
    conv = getattr(v, "conv1", None)
    if patch_matmul and isinstance(conv, nn.Conv2d):
        try:
            v.conv1 = PatchEmbedMatmul(conv)
        except ValueError:
            pass
    blocks = getattr(getattr(v, "transformer", None), "resblocks", None)
    if lean_blocks and blocks is not None and all(LeanBlock.supports(b) for b in blocks) \
            and not getattr(v.transformer, "grad_checkpointing", False) \
            and getattr(v.transformer, "batch_first", True):
        v.transformer.resblocks = nn.ModuleList(LeanBlock(b) for b in blocks)
    v = v.to(dtype).eval()
    for p in v.parameters():
        p.requires_grad_(False)
    return v
