"""Low-rank adapters (LoRA) in the attention of open_clip's ViT image tower, one set per image.

:class:`LoRAAttention` replaces a block's ``nn.MultiheadAttention`` (batch-first, fused QKV
projection, as open_clip builds it) and adds ``scaling · x A B`` (``scaling = alpha / rank``) to
the chosen projections: ``q``, ``k``, ``v`` (the rows of the fused ``in_proj``) and ``out``
(``out_proj``). The frozen weights are the wrapped module's own; nothing of them is copied.

The adapter weights are held per *group*: ``A [G, D, r]`` and ``B [G, r, D]``, the rows of the input
``[N, L, D]`` being G consecutive groups of ``N / G`` rows (an image's views). Each image thus owns
its adapters, and one optimiser over the ``[G, ...]`` tensors updates each image as if it were
alone (AdamW is element-wise and image g's loss reads only group g). :meth:`LoRAAttention.reset`
sets them to the saved initial values: ``A`` drawn once (Xavier normal, as TTL's
``init_method xavier``), ``B = 0``, so that at the start of every image the tower is the frozen
one (the LoRA term is zero).

:class:`LoRATower` is a copy of ``model.visual`` with :class:`LoRAAttention` in the chosen blocks,
split where the adapters start: :meth:`LoRATower.prefix` runs the stem and the blocks before the
first adapted one (frozen: computed once per image, without a graph; from another copy of them
where one is given, :meth:`LoRATower.use_frozen_copy`), :meth:`LoRATower.suffix` the rest, the
head included. The image feature is the class token's (``pool_type "tok"``), so the
last block runs its attention query, output projection and MLP on that token alone
(:meth:`LoRATower.last_block_on_class_token`; its keys and values still see every token): the
same sums for the token read, ~5/6 of the last block's work (forward and backward) left out.
"""
from __future__ import annotations

import copy
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

TARGETS = ("q", "k", "v", "out")


def vit_blocks(visual: nn.Module) -> Optional[nn.ModuleList]:
    """The residual blocks of an open_clip ViT image tower (None for a ResNet tower)."""
    return getattr(getattr(visual, "transformer", None), "resblocks", None)


def resolve_layers(layers: Sequence[int], n_blocks: int) -> List[int]:
    """Block indices (negative: from the end, as Python's) -> sorted, distinct, non-negative;
    ValueError naming the bad index."""
    out = []
    for i in layers:
        i = int(i)
        if not -n_blocks <= i < n_blocks:
            raise ValueError(f"block {i} is not among the {n_blocks} blocks of the image tower "
                             f"(0..{n_blocks - 1}, or -{n_blocks}..-1 from the end)")
        out.append(i % n_blocks)
    if len(set(out)) != len(out):
        raise ValueError(f"blocks {list(layers)} name a block twice ({n_blocks} blocks)")
    return sorted(out)


class LoRAAttention(nn.Module):
    """Drop-in for an open_clip block's ``attn``: ``forward(q_x, k_x, v_x, need_weights,
    attn_mask) -> (out, None)`` for self-attention (``q_x`` alone is read, as in the image
    tower)."""

    def __init__(self, attn: nn.MultiheadAttention, rank: int, alpha: float,
                 targets: Sequence[str], generator: Optional[torch.Generator] = None):
        super().__init__()
        if not (isinstance(attn, nn.MultiheadAttention) and attn.batch_first
                and attn._qkv_same_embed_dim and attn.in_proj_weight is not None):
            raise TypeError(f"LoRAAttention wraps a batch-first nn.MultiheadAttention with a fused "
                            f"QKV projection (open_clip's ViT blocks), got {type(attn).__name__}")
        bad = [t for t in targets if t not in TARGETS]
        if bad or not targets:
            raise ValueError(f"LoRA targets {list(targets)}: use some of {', '.join(TARGETS)}")
        self.attn = attn
        self.heads = int(attn.num_heads)
        self.dim = int(attn.embed_dim)
        self.rank = int(rank)
        self.scaling = float(alpha) / self.rank
        self.targets = tuple(t for t in TARGETS if t in targets)
        # the initial A of each target, drawn once (torch's xavier_normal_ on the [r, D] weight
        # of TTL's lora_A Linear: std = sqrt(2 / (D + r)), the same for its transpose [D, r])
        dev = attn.in_proj_weight.device
        for t in self.targets:
            a = torch.empty(self.rank, self.dim)
            std = (2.0 / (self.dim + self.rank)) ** 0.5
            a.normal_(0.0, std, generator=generator)
            self.register_buffer(f"a0_{t}", a.t().contiguous().to(dev), persistent=False)
        self.a: Dict[str, torch.Tensor] = {}
        self.b: Dict[str, torch.Tensor] = {}
        self.reset(1)

    def reset(self, groups: int) -> None:
        """``groups`` fresh adapter sets at their initial values (A as drawn, B = 0), leaves of
        the autograd graph."""
        for t in self.targets:
            a0 = getattr(self, f"a0_{t}")
            self.a[t] = a0.unsqueeze(0).repeat(groups, 1, 1).requires_grad_(True)
            self.b[t] = a0.new_zeros(groups, self.rank, self.dim).requires_grad_(True)

    def parameters_to_tune(self) -> List[torch.Tensor]:
        return [w for t in self.targets for w in (self.a[t], self.b[t])]

    def delta(self, t: str, x: torch.Tensor) -> torch.Tensor:
        """``scaling · x A_g B_g`` for each group g of the rows of ``x`` [N, L, D]."""
        G = self.a[t].shape[0]
        N, L, D = x.shape
        if N % G:
            raise ValueError(f"{N} rows are not {G} groups of equal size")
        xg = x.reshape(G, (N // G) * L, D)
        a, b = self.a[t].to(x.dtype), self.b[t].to(x.dtype)
        return (torch.bmm(torch.bmm(xg, a), b) * self.scaling).reshape(N, L, -1)

    def forward(self, q_x: torch.Tensor, k_x=None, v_x=None, need_weights: bool = False,
                attn_mask: Optional[torch.Tensor] = None, **_):
        """Self-attention of ``q_x`` [N, L, D]; or, with ``k_x`` (= ``v_x``) the block's tokens
        [N, L, D] and ``q_x`` [N, l, D] some of them, the attention of those queries alone over
        every token (the class token's, :meth:`LoRATower.last_block_on_class_token`)."""
        k_x = q_x if k_x is None else k_x
        if attn_mask is not None or (v_x is not None and v_x is not k_x):
            raise ValueError("LoRAAttention runs unmasked self-attention (the image tower) only")
        x = k_x
        N, L, D = x.shape
        w, bias = self.attn.in_proj_weight, self.attn.in_proj_bias
        if q_x is k_x:
            q, k, v = F.linear(x, w, bias).split(D, dim=-1)
        else:
            q = F.linear(q_x, w[:D], None if bias is None else bias[:D])
            k, v = F.linear(x, w[D:], None if bias is None else bias[D:]).split(D, dim=-1)
        if "q" in self.a:
            q = q + self.delta("q", q_x)
        if "k" in self.a:
            k = k + self.delta("k", x)
        if "v" in self.a:
            v = v + self.delta("v", x)
        h, d, lq = self.heads, D // self.heads, q_x.shape[1]
        q = q.reshape(N, lq, h, d).transpose(1, 2)
        k, v = (z.reshape(N, L, h, d).transpose(1, 2) for z in (k, v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(N, lq, D)
        out = self.attn.out_proj(o)
        if "out" in self.a:
            out = out + self.delta("out", o)
        return out, None


class LoRATower(nn.Module):
    """A frozen copy of an open_clip ViT image tower with :class:`LoRAAttention` in ``layers``
    (block indices; negative from the end). ``prefix(images)`` + ``suffix(h)`` equals the tower's
    forward; the adapters are those of the last :meth:`reset`."""

    def __init__(self, visual: nn.Module, layers: Sequence[int], rank: int, alpha: float,
                 targets: Sequence[str], seed: int = 0):
        super().__init__()
        blocks = vit_blocks(visual)
        if blocks is None or not all(hasattr(visual, k) for k in ("_embeds", "_pool", "proj")):
            raise TypeError(f"TTL adapts the attention of an open_clip ViT image tower; "
                            f"{type(visual).__name__} has none")
        if not getattr(visual.transformer, "batch_first", True):
            raise TypeError("TTL needs open_clip's batch-first image transformer")
        self.visual = copy.deepcopy(visual).eval()
        for p in self.visual.parameters():
            p.requires_grad_(False)
        self.layers = resolve_layers(layers, len(blocks))
        g = torch.Generator().manual_seed(int(seed))
        self.adapters: List[LoRAAttention] = []
        for i in self.layers:     # drawn in block order, q before k before v before out
            blk = self.visual.transformer.resblocks[i]
            blk.attn = LoRAAttention(blk.attn, rank, alpha, targets, g)
            self.adapters.append(blk.attn)
        self.start = self.layers[0]
        self.frozen_copy: Optional[nn.Module] = None   # use_frozen_copy
        # the head reads the class token alone: the last block computes that token only
        last = self.visual.transformer.resblocks[-1]
        self.class_token_only = (getattr(self.visual, "attn_pool", None) is None
                                 and getattr(self.visual, "pool_type", "") == "tok"
                                 and not hasattr(last, "ln_1_kv")
                                 and all(hasattr(last, k) for k in
                                         ("ln_1", "attn", "ls_1", "ln_2", "mlp", "ls_2")))

    def use_frozen_copy(self, copy_: nn.Module) -> None:
        """Run :meth:`prefix` on ``copy_``, another copy of the same tower whose blocks compute
        the same function in another form (e.g. stored in fp16 with lean blocks:
        :func:`argtca.engine.towers.fast_image_tower`); its blocks from the first adapted one
        on are dropped. Its inputs are then of its own dtype."""
        copy_.transformer.resblocks = copy_.transformer.resblocks[:self.start]
        for p in copy_.parameters():
            p.requires_grad_(False)
        self.frozen_copy = copy_.eval()

    @torch.no_grad()
    def prefix(self, images: torch.Tensor) -> torch.Tensor:
        """[N, 3, S, S] -> the tokens entering the first adapted block [N, L, D] (frozen)."""
        v = self.visual if self.frozen_copy is None else self.frozen_copy
        x = v._embeds(images)
        for blk in v.transformer.resblocks[:self.start]:
            x = blk(x)
        return x

    def suffix(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens from :meth:`prefix` [N, L, D] -> image features [N, E] (not normalised)."""
        v = self.visual
        blocks = list(v.transformer.resblocks[self.start:])
        last = blocks.pop() if self.class_token_only else None
        for blk in blocks:
            x = blk(x)
        if last is not None:
            x = self.last_block_on_class_token(last, x)
        pooled, _ = v._pool(x)
        return pooled @ v.proj if v.proj is not None else pooled

    @staticmethod
    def last_block_on_class_token(blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """open_clip's ``ResidualAttentionBlock`` on the tokens ``x`` [N, L, D], the output's
        class token [N, 1, D] only: its query, output projection and MLP on that token, its
        keys and values from every token (what ``blk(x)[:, :1]`` computes, in fewer sums)."""
        h = blk.ln_1(x)
        y = x[:, :1] + blk.ls_1(blk.attn(h[:, :1], h, h, need_weights=False)[0])
        return y + blk.ls_2(blk.mlp(blk.ln_2(y)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.suffix(self.prefix(images))

    def reset(self, groups: int) -> None:
        """Every adapter back to its initial value, ``groups`` images' worth."""
        for a in self.adapters:
            a.reset(groups)

    def parameters_to_tune(self) -> List[torch.Tensor]:
        return [w for a in self.adapters for w in a.parameters_to_tune()]
