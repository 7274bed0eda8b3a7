"""The fast engine's text tower: prefix sharing, EOS-only last layer, and the Jacobian at θ0.

Every prompt of an image is ``[SOS] ctx_1..ctx_n <suffix_p> [EOS]``. Under CLIP's causal mask the
hidden states of the first ``n0 = 1 + n`` positions (SOS and the context) depend on those positions
only, so they are **the same for all P prompts** of an image: :class:`PrefixSharedText` computes
them once per image ([B, n0, W] instead of [B·P, n0, W]) and lets each prompt's suffix attend to
the shared keys/values. In the last layer only the EOS row of each prompt is read, so its query,
output projection and MLP run on that row alone. Both are exact (the same sums in another order);
at K=101 (202 prompts x 13 tokens) they remove ~45 % of the text tower's FLOPs, at K=1000
(2000 x 17) ~35 %.

:func:`text_jacobian` computes ``J = ∂T/∂ctx`` at θ0 (forward mode, ``torch.func.jvp`` under
``vmap`` over chunks of the n·W basis tangents). With one AdamW step per image (TPT/TCA's setting)
the gradient of every image is taken at θ0, so ``Jᵀ · ∂L_b/∂T`` — one matrix product for the batch —
replaces the per-image backward pass through the text tower (``grad_mode="jacobian"`` of
:class:`~argtca.engine.fast.FastEngine`). Mathematically the same gradient; only rounding differs.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from argtca.engine.towers import LeanBlock
from argtca.models.text import project_text

ATTENTION = ("sdpa", "manual", "split")


def _causal_float_mask(L: int) -> torch.Tensor:
    return torch.full((L, L), float("-inf")).triu_(1)


def prefix_sharing_supported(encoder) -> Optional[str]:
    """None when :class:`PrefixSharedText` can run ``encoder`` (a
    :class:`~argtca.models.text.PromptTextEncoder` over an open_clip CLIP text tower of
    ``ResidualAttentionBlock`` s with a causal mask), else the reason it cannot."""
    model = getattr(encoder, "model", None)
    tr = getattr(model, "transformer", None)
    blocks = getattr(tr, "resblocks", None)
    if blocks is None or not hasattr(encoder, "token_suffix"):
        return "not an open_clip CLIP text tower behind a PromptTextEncoder"
    mask = getattr(model, "attn_mask", None)
    L = int(encoder.seq_len)
    if mask is None or tuple(mask.shape[-2:]) < (L, L) or not torch.equal(
            mask[:L, :L].float().cpu(), _causal_float_mask(L)):
        return "the text tower's attention mask is not causal"
    for b in blocks:
        attn = getattr(b, "attn", None)
        if isinstance(attn, nn.MultiheadAttention) and not getattr(attn, "batch_first", False):
            return "a text block that is not batch-first"
        if not LeanBlock.supports(b):
            return "a text block that is not CLIP's self-attention block"
    sos = encoder.token_prefix
    if sos.shape[1] != 1 or not torch.equal(sos, sos[:1].expand_as(sos)):
        return "prompts that do not share their start token"
    if int(encoder.eot_idx.min()) < 1 + int(encoder.n_ctx):
        return "a prompt whose EOS falls inside the context"
    return None


class PrefixSharedText(nn.Module):
    """``forward(ctx [B, n, W] or [n, W]) -> text features [B, P, E] (or [P, E])``, the same
    features as ``encoder(ctx)`` (:class:`~argtca.models.text.PromptTextEncoder`).

    ``attention``: ``"sdpa"`` (``F.scaled_dot_product_attention``; the kernel follows
    ``torch.nn.attention.sdpa_kernel``), ``"manual"`` (softmax(QKᵀ/√d)V in plain ops, which
    ``torch.func`` transforms support everywhere) or ``"split"`` (plain ops; the suffix queries
    meet the image's shared prefix keys/values directly instead of a per-prompt copy of them:
    scores against the prefix and against the suffix, one softmax over both in fp32)."""

    def __init__(self, encoder, attention: str = "sdpa"):
        super().__init__()
        why = prefix_sharing_supported(encoder)
        if why is not None:
            raise ValueError(f"PrefixSharedText: {why}")
        if attention not in ATTENTION:
            raise ValueError(f"attention={attention!r}: use one of {ATTENTION}")
        self.encoder = encoder
        self.attention = attention
        model = encoder.model
        self.blocks = list(model.transformer.resblocks)
        self.n0 = 1 + int(encoder.n_ctx)
        L = int(encoder.seq_len)
        Ls = L - self.n0
        dev = encoder.token_suffix.device
        i = torch.arange(L, device=dev)
        # True = may attend. Prefix: causal among the n0 positions; suffix rows: every prefix key
        # and the suffix keys up to themselves; last layer: each prompt's EOS row only.
        self.register_buffer("mask_pre", i[:self.n0, None] >= i[None, :self.n0], persistent=False)
        self.register_buffer("mask_suf", i[self.n0:, None] >= i[None, :], persistent=False)
        eos = encoder.eot_idx.long()
        self.register_buffer("eos_suf", eos - self.n0, persistent=False)              # [P]
        self.register_buffer("mask_eos", (i[None, :] <= eos[:, None])[:, None, None, :],
                             persistent=False)                                         # [P,1,1,L]
        self.Ls = Ls

    @property
    def num_prompts(self) -> int:
        return self.encoder.num_prompts

    # ------------------------------------------------------------------ pieces
    def _qkv(self, blk, x):
        attn = blk.attn
        H = attn.num_heads
        q, k, v = F.linear(x, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        shape = x.shape[:-1] + (H, x.shape[-1] // H)
        return tuple(t.reshape(shape).transpose(-3, -2) for t in (q, k, v))   # [..., H, l, d]

    def _attend(self, q, k, v, mask):
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1).to(v.dtype) @ v

    def _attend_split(self, q, k_pre, v_pre, ks, vs, mask_ss, B: int):
        """Attention of the suffix queries q [B·P, H, l, d] over the shared prefix keys/values
        [B, H, n0, d] and their own suffix keys/values [B·P, H, Ls, d] (``mask_ss``: which suffix
        keys a query may see; every prefix key is visible), without copying the prefix per
        prompt. The same sums as attention over the concatenated keys."""
        BP, H, lq, d = q.shape
        P, n0 = BP // B, k_pre.shape[-2]
        qb = q.reshape(B, P, H, lq, d)
        s_pre = torch.einsum("bphld,bhnd->bphln", qb, k_pre).reshape(BP, H, lq, n0)
        s_suf = (q @ ks.transpose(-1, -2)).masked_fill(~mask_ss, float("-inf"))
        s = torch.cat([s_pre, s_suf], -1).float() * (1.0 / math.sqrt(d))
        p = torch.softmax(s, dim=-1).to(vs.dtype)
        o_pre = torch.einsum("bphln,bhnd->bphld", p[..., :n0].reshape(B, P, H, lq, n0), v_pre)
        return o_pre.reshape(BP, H, lq, d) + p[..., n0:] @ vs

    def _out(self, blk, o):
        o = o.transpose(-3, -2)
        o = o.reshape(o.shape[:-2] + (-1,))
        return blk.ls_1(F.linear(o, blk.attn.out_proj.weight, blk.attn.out_proj.bias))

    @staticmethod
    def _mlp(blk, h):
        return h + blk.ls_2(blk.mlp(blk.ln_2(h)))

    # ------------------------------------------------------------------ forward
    def forward(self, ctx: torch.Tensor) -> torch.Tensor:
        single = ctx.dim() == 2
        if single:
            ctx = ctx.unsqueeze(0)
        enc = self.encoder
        model = enc.model
        B, P, n0, Ls = ctx.shape[0], self.num_prompts, self.n0, self.Ls
        W = ctx.shape[-1]
        cast = model.transformer.get_cast_dtype()
        pos = model.positional_embedding[:n0 + Ls].to(cast)
        sos = enc.token_prefix[:1, 0].to(cast)                                      # [1, W]
        h_pre = torch.cat([sos.unsqueeze(0).expand(B, 1, W), ctx.to(cast)], 1) + pos[:n0]
        h_suf = (enc.token_suffix.to(cast) + pos[n0:]).unsqueeze(0).expand(B, P, Ls, W)
        h_suf = h_suf.reshape(B * P, Ls, W)
        rows = self.eos_suf.repeat(B)                                                 # [B*P]
        ar = torch.arange(B * P, device=rows.device)
        n_layers = len(self.blocks)
        h_eos = None
        for li, blk in enumerate(self.blocks):
            last = li == n_layers - 1
            q, k, v = self._qkv(blk, blk.ln_1(h_pre))                                 # [B,H,n0,d]
            if not last:
                h_pre_next = self._mlp(blk, h_pre + self._out(blk, self._attend(
                    q, k, v, self.mask_pre)))
            H, d = k.shape[1], k.shape[-1]
            qs, ks, vs = self._qkv(blk, blk.ln_1(h_suf))                              # [BP,H,Ls,d]
            if self.attention == "split":
                def attend(qq, mask):
                    return self._attend_split(qq, k, v, ks, vs, mask[..., n0:], B)
            else:
                kp = k.unsqueeze(1).expand(B, P, H, n0, d).reshape(B * P, H, n0, d)
                vp = v.unsqueeze(1).expand(B, P, H, n0, d).reshape(B * P, H, n0, d)
                K = torch.cat([kp, ks], dim=2)
                V = torch.cat([vp, vs], dim=2)

                def attend(qq, mask):
                    return self._attend(qq, K, V, mask)
            if last:   # only the EOS row of each prompt is read
                qe = qs[ar, :, rows].unsqueeze(2)                                     # [BP,H,1,d]
                mask = self.mask_eos.repeat(B, 1, 1, 1)                               # [BP,1,1,L]
                he = h_suf[ar, rows].unsqueeze(1)                                     # [BP,1,W]
                he = self._mlp(blk, he + self._out(blk, attend(qe, mask)))
                h_eos = he[:, 0]
            else:
                h_suf = self._mlp(blk, h_suf + self._out(blk, attend(qs, self.mask_suf)))
                h_pre = h_pre_next
        x = model.ln_final(h_eos)
        f = F.normalize(project_text(model, x).float(), dim=-1).reshape(B, P, -1)
        return f[0] if single else f


# ---------------------------------------------------------------------- forward mode, by hand
def _act_derivative(act: nn.Module, u: torch.Tensor) -> Optional[torch.Tensor]:
    """d act(u) / du for CLIP's activations (QuickGELU, exact GELU); None for any other."""
    name = type(act).__name__
    if name == "QuickGELU":
        s = torch.sigmoid(1.702 * u)
        return s + 1.702 * u * s * (1 - s)
    if isinstance(act, nn.GELU) and act.approximate == "none":
        return 0.5 * (1 + torch.erf(u * 0.7071067811865476)) \
            + u * torch.exp(-0.5 * u * u) * 0.3989422804014327
    return None


def tangents_supported(text: PrefixSharedText) -> bool:
    """Whether :func:`text_tangents` knows every piece of the tower (else use ``torch.func``)."""
    for blk in text.blocks:
        mlp = blk.mlp
        if not (isinstance(blk.ls_1, nn.Identity) and isinstance(blk.ls_2, nn.Identity)
                and isinstance(mlp, nn.Sequential) and len(mlp) == 3
                and isinstance(mlp[0], nn.Linear) and isinstance(mlp[2], nn.Linear)
                and _act_derivative(mlp[1], torch.zeros(1)) is not None
                and isinstance(blk.ln_1, nn.LayerNorm) and isinstance(blk.ln_2, nn.LayerNorm)):
            return False
    proj = text.encoder.model.text_projection
    return isinstance(text.encoder.model.ln_final, nn.LayerNorm) and (
        proj is None or isinstance(proj, (torch.Tensor, nn.Linear)))


def _ln_jvp(ln: nn.LayerNorm, x: torch.Tensor, t: torch.Tensor):
    """(ln(x), tangent) for a tangent batch ``t`` [m, *x.shape] (fp32 statistics, as autocast)."""
    y = ln(x)
    xf = x.float()
    xc = xf - xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xc * xc).mean(-1, keepdim=True) + ln.eps)
    xh = xc * rstd
    tf = t.float()
    tc = tf - tf.mean(-1, keepdim=True)
    dt = rstd * (tc - xh * (xh * tc).mean(-1, keepdim=True))
    if ln.weight is not None:
        dt = dt * ln.weight.float()
    return y, dt.to(y.dtype)


def _softmax_jvp(s: torch.Tensor, ds: torch.Tensor, mask: torch.Tensor):
    """``a = softmax(s)`` over the last dim (fp32) and its tangent for score tangents ``ds``
    (masked keys: -inf in ``s``, no tangent)."""
    a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    ds = ds.float().masked_fill(~mask, 0.0)
    return a, a * (ds - (a * ds).sum(-1, keepdim=True))


def _prefix_attend_jvp(q, k, v, dq, dk, dv, mask):
    """Causal attention of the image's prefix (one sequence) and its tangent, in the
    ``[..., l, H, d]`` layout: primal [n0, H, d], tangents [m, n0, H, d], ``mask`` [n0, 1, n0]."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("lhd,jhd->lhj", q, k).float() * scale
    ds = (torch.einsum("mlhd,jhd->mlhj", dq, k) + torch.einsum("lhd,mjhd->mlhj", q, dk)) * scale
    a, da = _softmax_jvp(s, ds, mask)
    a, da = a.to(v.dtype), da.to(v.dtype)
    o = torch.einsum("lhj,jhd->lhd", a, v)
    do = torch.einsum("mlhj,jhd->mlhd", da, v) + torch.einsum("lhj,mjhd->mlhd", a, dv)
    return o, do


def _split_attend_jvp(q, kp, vp, ks, vs, dq, dkp, dvp, dks, dvs, mask_ss):
    """Attention of the prompts' suffix queries over [the shared prefix keys | their own suffix
    keys] and its tangent, in the ``[..., l, H, d]`` layout, with nothing copied per prompt or per
    tangent: primal ``q`` [P, l, H, d], ``kp``/``vp`` [n0, H, d] (the image's one prefix),
    ``ks``/``vs`` [P, Ls, H, d]; tangents ``dq`` [m, P, l, H, d], ``dkp``/``dvp`` [m, n0, H, d],
    ``dks``/``dvs`` [m, P, Ls, H, d] (``dq``, ``dks``, ``dvs`` None: zero). ``mask_ss``
    [.., l, 1, Ls]: the suffix keys a query sees (it sees every prefix key). The prefix keys
    are shared by every row, so the products with them are one matrix product against a
    block-diagonal [H·d, H·n0] matrix (``torch.block_diag``, one block per head); every other
    product is a batched ``einsum``."""
    n0, H, d = kp.shape
    scale = 1.0 / math.sqrt(d)
    s = torch.cat([torch.einsum("plhd,nhd->plhn", q, kp),
                   torch.einsum("plhd,pjhd->plhj", q, ks)], -1).float() * scale
    ds_pre = torch.einsum("plhd,mnhd->mplhn", q, dkp)
    if dq is not None:
        kbd = torch.block_diag(*kp.permute(1, 2, 0))               # [H·d, H·n0]
        ds_pre = ds_pre + (dq.flatten(-2) @ kbd).unflatten(-1, (H, n0))
        ds_suf = torch.einsum("mplhd,pjhd->mplhj", dq, ks)
    else:
        ds_suf = ds_pre.new_zeros(ds_pre.shape[:-1] + ks.shape[1:2])
    if dks is not None:
        ds_suf = ds_suf + torch.einsum("plhd,mpjhd->mplhj", q, dks)
    mask = torch.cat([mask_ss.new_ones(mask_ss.shape[:-1] + (n0,)), mask_ss], -1)
    a, da = _softmax_jvp(s, torch.cat([ds_pre, ds_suf], -1) * scale, mask)
    a, da = a.to(vs.dtype), da.to(vs.dtype)
    o = torch.einsum("plhn,nhd->plhd", a[..., :n0], vp) \
        + torch.einsum("plhj,pjhd->plhd", a[..., n0:], vs)
    vbd = torch.block_diag(*vp.transpose(0, 1))                     # [H·n0, H·d]
    do = (da[..., :n0].flatten(-2) @ vbd).unflatten(-1, (H, d))
    do = do + torch.einsum("mplhj,pjhd->mplhd", da[..., n0:], vs)
    do = do + torch.einsum("plhn,mnhd->mplhd", a[..., :n0], dvp)
    if dvs is not None:
        do = do + torch.einsum("plhj,mpjhd->mplhd", a[..., n0:], dvs)
    return o, do


def _qkv_jvp(blk, x, t):
    """q, k, v [..., l, H, d] of ``ln_1(x)`` and their tangents (None where ``t`` is)."""
    a = blk.attn
    W = x.shape[-1]
    heads = (3, a.num_heads, W // a.num_heads)
    if t is None:
        y, dy = blk.ln_1(x), None
    else:
        y, dy = _ln_jvp(blk.ln_1, x, t)
    q, k, v = F.linear(y, a.in_proj_weight, a.in_proj_bias).unflatten(-1, heads).unbind(-3)
    if dy is None:
        return q, k, v, None, None, None
    dq, dk, dv = F.linear(dy, a.in_proj_weight).unflatten(-1, heads).unbind(-3)
    return q, k, v, dq, dk, dv


def _out_mlp_jvp(blk, h, th, o, do):
    """The block's output projection, residual and MLP after attention, with tangents (``th``
    None: zero)."""
    a = blk.attn
    h = h + F.linear(o.flatten(-2), a.out_proj.weight, a.out_proj.bias)
    d_out = F.linear(do.flatten(-2), a.out_proj.weight)
    th = d_out if th is None else th + d_out
    y, dy = _ln_jvp(blk.ln_2, h, th)
    fc, act, pr = blk.mlp[0], blk.mlp[1], blk.mlp[2]
    u = fc(y)
    du = F.linear(dy, fc.weight)
    dg = du * _act_derivative(act, u.float()).to(du.dtype)
    return h + pr(act(u)), th + F.linear(dg, pr.weight)


def _block_jvp(blk, h_pre, t_pre, h_suf, t_suf, mask_pre, mask_ss):
    """One text block with tangents: the prefix ([n0, W], tangents [m, n0, W]) and the prompts'
    suffixes ([P, Ls, W], tangents [m, P, Ls, W]; None: zero) -> the same four after the block."""
    q, k, v, dq, dk, dv = _qkv_jvp(blk, h_pre, t_pre)
    o, do = _prefix_attend_jvp(q, k, v, dq, dk, dv, mask_pre)
    qs, ks, vs, dqs, dks, dvs = _qkv_jvp(blk, h_suf, t_suf)
    os_, dos = _split_attend_jvp(qs, k, v, ks, vs, dqs, dk, dv, dks, dvs, mask_ss)
    return _out_mlp_jvp(blk, h_pre, t_pre, o, do) + _out_mlp_jvp(blk, h_suf, t_suf, os_, dos)


def _last_block_jvp(blk, h_pre, t_pre, h_suf, t_suf, rows, mask_es):
    """The last block on each prompt's EOS row only: -> its hidden state [P, W] and tangents
    [m, P, W]."""
    P = h_suf.shape[0]
    ar = torch.arange(P, device=rows.device)
    _, k, v, _, dk, dv = _qkv_jvp(blk, h_pre, t_pre)
    qs, ks, vs, dqs, dks, dvs = _qkv_jvp(blk, h_suf, t_suf)
    qe = qs[ar, rows].unsqueeze(1)                                                   # [P,1,H,d]
    dqe = dqs[:, ar, rows].unsqueeze(2) if dqs is not None else None
    o, do = _split_attend_jvp(qe, k, v, ks, vs, dqe, dk, dv, dks, dvs, mask_es)
    he = h_suf[ar, rows].unsqueeze(1)                                                 # [P,1,W]
    te = t_suf[:, ar, rows].unsqueeze(2) if t_suf is not None else None
    he, te = _out_mlp_jvp(blk, he, te, o, do)
    return he[:, 0], te[:, :, 0]


def text_tangents(text: PrefixSharedText, ctx0: torch.Tensor, tan: torch.Tensor,
                  block=_block_jvp, last_block=_last_block_jvp) -> torch.Tensor:
    """Tangents [m, P, E] of the features ``text(ctx0)`` along ``tan`` [m, n, W] (forward-mode
    differentiation written out: LayerNorm, the attention softmax, QuickGELU/GELU, the
    normalisation), with the prefix shared as in the forward and its attention split as in
    :meth:`PrefixSharedText._attend_split`: the primal quantities (one prefix, P suffixes) are
    never copied per tangent, the tangents' prefix never per prompt (:func:`_split_attend_jvp`).
    The tangent matrix products run as large batched products under the caller's autocast (the
    same precision as the forward). ``block`` / ``last_block``: the per-block functions (e.g.
    their ``torch.compile`` s: one compilation serves every block of the same shapes)."""
    enc = text.encoder
    model = enc.model
    n0, Ls, W = text.n0, text.Ls, ctx0.shape[-1]
    m = tan.shape[0]
    cast = model.transformer.get_cast_dtype()
    pos = model.positional_embedding[:n0 + Ls].to(cast)
    sos = enc.token_prefix[:1, 0].to(cast)
    h_pre = torch.cat([sos, ctx0.to(cast)], 0) + pos[:n0]                          # [n0, W]
    t_pre = torch.cat([tan.new_zeros(m, 1, W), tan], 1).to(cast)                   # [m, n0, W]
    h_suf = enc.token_suffix.to(cast) + pos[n0:]                                    # [P, Ls, W]
    t_suf = None                                                                   # zero so far
    mask_pre = text.mask_pre[:, None, :]                                            # [n0, 1, n0]
    mask_ss = text.mask_suf[:, None, n0:]                                           # [Ls, 1, Ls]
    for blk in text.blocks[:-1]:
        h_pre, t_pre, h_suf, t_suf = block(blk, h_pre, t_pre, h_suf, t_suf, mask_pre, mask_ss)
    h_eos, t_eos = last_block(text.blocks[-1], h_pre, t_pre, h_suf, t_suf, text.eos_suf,
                              text.mask_eos[..., n0:])                              # [P,1,1,Ls]
    x, dx = _ln_jvp(model.ln_final, h_eos, t_eos)
    u, du = project_text(model, x).float(), project_text(model, dx).float()
    if isinstance(model.text_projection, nn.Linear) and model.text_projection.bias is not None:
        du = du - model.text_projection.bias.float()
    norm = u.norm(dim=-1, keepdim=True)
    f = u / norm
    return (du - f * (f * du).sum(-1, keepdim=True)) / norm                         # [m, P, E]


def text_jacobian(text: PrefixSharedText, ctx0: torch.Tensor, chunk: int = 64,
                  dtype: torch.dtype = torch.float32,
                  by_hand: Optional[bool] = None, compile: bool = False,
                  rows: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """``Jᵀ`` of ``ctx ↦ text(ctx)`` at ``ctx0`` [n, W], as a [n·W, P·E] matrix (row i = the
    derivative of every feature along input coordinate i), by forward mode over ``chunk`` basis
    tangents at a time (:func:`text_tangents`, or ``torch.func.jvp`` for towers it does not
    know). ``rows=(lo, hi)``: only rows lo..hi-1 ([hi-lo, P·E]; the ranks of a multi-GPU run
    share the work). Run it under the autocast the engine uses for the text tower."""
    from torch.func import jvp, vmap
    n, W = ctx0.shape
    D = n * W
    x0 = ctx0.detach()
    if by_hand is None:
        by_hand = tangents_supported(text)

    def f(x):
        return text(x)

    def tangent(t):
        return jvp(f, (x0,), (t,))[1]

    # compile: block by block (one compilation serves the blocks with the same shapes: the
    # first, the middle ones, the last), one shape (the last chunk is padded with zero
    # tangents, whose rows are dropped)
    if compile and by_hand:
        fns = dict(block=torch.compile(_block_jvp, dynamic=False),
                   last_block=torch.compile(_last_block_jvp, dynamic=False))

        def tangents_fn(text, x, t):
            return text_tangents(text, x, t, **fns)
    else:
        tangents_fn = text_tangents
    lo, hi = rows if rows is not None else (0, D)
    if not 0 <= lo <= hi <= D:
        raise ValueError(f"text_jacobian: rows {rows} outside 0..{D}")
    chunk = max(1, min(chunk, hi - lo))
    out = None
    with torch.no_grad():
        for i in range(lo, hi, chunk):
            m = min(chunk, hi - i)
            basis = torch.zeros(chunk if compile else m, D, device=x0.device, dtype=x0.dtype)
            basis[torch.arange(m), torch.arange(i, i + m)] = 1
            if by_hand:
                jt = tangents_fn(text, x0, basis.view(-1, n, W))[:m]                # [m, P, E]
            else:
                jt = vmap(tangent)(basis.view(m, n, W))
            if out is None:
                out = torch.empty(hi - lo, jt.shape[1] * jt.shape[2], device=x0.device,
                                  dtype=dtype)
            out[i - lo:i - lo + m] = jt.reshape(m, -1).to(dtype)
    if out is None:   # no rows
        out = torch.empty(0, int(text.num_prompts) * int(text(x0).shape[-1]), device=x0.device,
                          dtype=dtype)
    return out
