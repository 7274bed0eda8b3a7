"""The fast engine: episodic test-time tuning of B images at once, exactly equivalent per image to
:class:`argtca.engine.reference.ReferenceEngine` (same maths; only floating-point reordering).

Every image owns its context ``ctx[b]`` and its AdamW moments (AdamW is element-wise, so one
optimiser over a ``[B, n, W]`` tensor updates each image as if it were alone). Under fp16 autocast
the loss is multiplied by a *static* loss scale (``TTA.LOSS_SCALE``) and an image whose gradient
overflows skips its step alone (the reference's rule); there is no GradScaler state shared across
images. Parameters stay fp32; CUDA computes under fp16 autocast (``TTA.PREC amp``), CPU in fp32.

Exact savings over the reference:

* **θ0 caching.** The context is reset to θ0 for every image, so the text features at θ0,
  ``T0 = T(θ0)`` ([P, E]), are the same for every image: they are computed once per engine (per
  dataset). Step 1 needs per image only the gradient ``J(θ0)ᵀ · ∂L_b/∂T``; the θ0 autograd graph is
  kept and each batch runs one vector-Jacobian product with the B cotangents
  (:mod:`argtca.engine.gradients`; ``grad_mode``: ``"vjp"`` batches them with
  ``torch.autograd.grad(..., is_grads_batched=True)``, ``"loop"`` runs one VJP per image on the
  kept graph, ``"recompute"`` runs the batched forward at θ0 again as the reference does).
* **Text-only regularisers** (``objective.text_only()``): C-TPT/O-TPT/A-TPT/TCA terms depend on the
  text features only, so their value and their gradient at θ0 are computed once.
* **View 0** features are computed once and reused for the final prediction; prompts are already
  cut after the longest EOS by :class:`~argtca.models.text.PromptTextEncoder`.
* **Prefix sharing** (``TTA.FAST.PREFIX_SHARE``, on): SOS + context computed once per image for
  all P prompts, the last layer on EOS rows only (:mod:`argtca.engine.text_tower`).
* **The Jacobian at θ0** (``grad_mode="jacobian"``): Jᵀ computed once by forward mode; step 1 of
  every batch is then one matrix product (``"auto"`` picks it on CUDA for long enough test sets).
* **No waiting per batch**: :meth:`FastEngine.submit` queues a batch and returns a
  :class:`Pending` whose ``result()`` copies the probabilities back and runs the checks, so the
  loop (:mod:`argtca.engine.pipeline`) keeps one batch in flight (:mod:`argtca.engine.submission`).
* **Zero-shot** (``TTA.STEPS 0``) predicts straight from the cached ``T0``.
* No host-device synchronisation inside a batch: the non-finite-loss check of the reference is
  accumulated on the device and raised (with the same message) once the batch is done.
* Large batches are processed in chunks (images for the image tower, prompts x tokens for the text
  tower) so memory stays bounded; chunking never changes a number beyond float reordering.

Speed knobs: ``TTA.FAST.*`` (:mod:`argtca.config`, one default each). None changes the maths;
they change floating-point rounding at most. What each one buys is measured in
``benchmarks/README.md#fast-engine-knobs``.

* ``GRAD_MODE``: how step 1's gradient is taken (above). ``auto`` takes ``jacobian`` where Jᵀ
  pays back (CUDA, one step, ≥ n·W test images, Jᵀ fits in memory), else ``recompute`` with a
  compiled text tower, else ``vjp``: the fastest combination in each case.
* ``TEXT_ATTENTION``: ``split`` (plain ops: the suffix queries meet the shared prefix keys
  without per-prompt copies) is the fastest forward, so ``auto`` takes it where the text tower
  runs forward only (grad mode ``jacobian``, or no step); else the SDPA ``efficient`` kernel,
  whose backward is the fastest for ``recompute``/``vjp``.
* ``HALF_IMAGE`` / ``LEAN_IMAGE`` / ``FOLD_QUICKGELU``: under fp16 autocast the image tower runs
  from a copy stored in fp16 (no weight or LayerNorm casts per call) with the patch embedding as
  a matrix product, lean SDPA blocks and QuickGELU as one SiLU pass with its 1.702 folded into
  the MLP's weights (:mod:`argtca.engine.towers`); it differs from autocast by fp16 rounding.
* ``COMPILE_IMAGE`` / ``COMPILE_TEXT`` / ``COMPILE_TEXT_GRAD`` (``auto``: as ``TTA.COMPILE``,
  which :mod:`argtca.config.settle` turns on only for runs long enough to pay compilation back):
  ``torch.compile`` of the image tower (block by block: one compilation serves every block), of
  the text tower's no-grad pass and of its passes with gradient (grad mode ``recompute``). The
  kept θ0 graph of ``vjp``/``loop`` is never compiled: it is differentiated many times.
* ``COMPILE_JACOBIAN`` (off): the tangent pass that builds Jᵀ runs once per dataset, so
  compiling it costs more than it saves (except from a warm Inductor cache).
* ``JACOBIAN_TF32`` (on): grad mode ``jacobian``'s per-batch product ``cot @ Jᵀ`` on TF32 tensor
  cores (fp32 sums; the reference's own backward runs in fp16 autocast).
* ``IMAGE_CHUNK`` / ``TEXT_TOKENS``: views per image-tower call / prompt tokens per text-tower
  call: memory bounds.
* ``CUDA_GRAPH`` (``auto`` = off; ``on``: the eager CUDA engine whose step 1 needs no kept θ0
  graph, i.e. grad mode ``jacobian``/``recompute`` or no step): :meth:`FastEngine.submit`
  captures a batch's whole work (image tower, steps, final prediction) once per batch shape as a
  CUDA graph and replays it, so the host queues one graph a batch instead of ~840 kernels
  (:mod:`argtca.engine.graphs`). The first batch of a shape runs eagerly (the warm-up); AdamW
  steps with ``capturable=True`` inside the graph (fp32 rounding of its bias corrections). The
  eager loop is bound by the GPU, so it frees the host thread but gains < 1 %
  (``benchmarks/README.md#known-limits-and-missed-targets``).
"""
from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from argtca.engine.gradients import StepGradients
from argtca.engine.jacobian import JacobianAtTheta0
from argtca.engine.objectives import Objective
from argtca.engine.reference import ReferenceEngine, raise_if_non_finite_probs
from argtca.utils.precision import autocast_ctx
from argtca.engine.submission import Pending, Submission
from argtca.registry import ENGINE_REGISTRY

__all__ = ["FastEngine", "Pending", "GRAD_MODES", "TEXT_ATTENTION"]

GRAD_MODES = ("vjp", "loop", "recompute", "jacobian")
# scaled-dot-product attention kernels for the text tower: prompts are short (L ~ 10-20 tokens), so
# flash/cuDNN tiles of 64-128 rows are mostly padding; "math" runs plain batched matmuls.
# "split" (prefix-shared tower only): plain ops, suffix queries meet the shared prefix keys/values
# without per-prompt copies (argtca/engine/text_tower.py)
TEXT_ATTENTION = {"default": None, "math": "MATH", "efficient": "EFFICIENT_ATTENTION",
                  "flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "split": None}


def _switch(value, default: bool) -> bool:
    """A ``TTA.FAST`` switch: "on"/"off" (or a bool); "auto" is ``default``."""
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    return default if v == "auto" else v in ("on", "true", "1")


def _graph_switch(value, default: bool, on_cuda: bool):
    """A CUDA-graph switch (``CUDA_GRAPH``, ``TEXT_GRAPH``) -> (on, emulate): on CUDA only, as
    :func:`_switch` says; "emulate" (tests) runs the graphs' protocol on any device."""
    emulate = str(value).strip().lower() == "emulate"
    return emulate or (_switch(value, default) and on_cuda), emulate


@ENGINE_REGISTRY.register(name="fast")
class FastEngine(Submission, StepGradients, JacobianAtTheta0, ReferenceEngine):
    """``engine(views [B, V, 3, S, S], paths) -> probs [B, K]``, the reference engine's API; the
    test loop feeds it ``TTA.BATCH_IMAGES`` images at a time (``batched``). The knobs are read
    from ``cfg.TTA.FAST``; a keyword given here wins over its key (the benchmark compares
    settings on one configuration). ``n_images``: the test images this engine will see (grad
    mode ``auto`` depends on it)."""

    batched = True
    compiles = True     # TTA.COMPILE compiles its towers (argtca/config/settle.py)
    _in_graph = False   # inside a CUDA graph's warm-up or capture (argtca/engine/graphs.py)

    @property
    def text_graph_auto(self) -> bool:
        """``TTA.FAST.TEXT_GRAPH`` "auto" on CUDA: on where there are steps after the first
        (RLCF's 3: steady 1.18-1.42x on an H200), off for one step, where only the final
        prediction's pass would replay and the graphs cost more than they save (the TPT
        family, TCA, ArgTCA: steady 0.72-0.85x on the same H200; benchmarks/README.md)."""
        return self.steps > 1

    def __init__(self, model, text_encoder, objective: Objective, cfg, device, *,
                 n_images: Optional[int] = None, grad_mode: Optional[str] = None,
                 text_attention: Optional[str] = None, prefix_share: Optional[bool] = None,
                 half_image: Optional[bool] = None, lean_image: Optional[bool] = None,
                 compile_image: Optional[bool] = None, compile_text: Optional[bool] = None,
                 compile_text_grad: Optional[bool] = None,
                 compile_jacobian: Optional[bool] = None, compile_mode: Optional[str] = None,
                 jacobian_tf32: Optional[bool] = None, image_chunk: Optional[int] = None,
                 text_tokens: Optional[int] = None, cuda_graph=None,
                 fold_gelu: Optional[bool] = None, text_graph=None):
        # the hyper-parameters (steps, selection, AdamW, precision, loss scale) as the reference
        super().__init__(model, text_encoder, objective, cfg, device)
        knobs = cfg.TTA.FAST

        def pick(given, key):
            return knobs[key] if given is None else given

        on_cuda = self.device.type == "cuda"
        compile_all = _switch(cfg.TTA.get("COMPILE", "off"), False)   # resolved: config/settle.py
        self.compile_image = _switch(pick(compile_image, "COMPILE_IMAGE"), compile_all) and on_cuda
        self.compile_text = _switch(pick(compile_text, "COMPILE_TEXT"), compile_all) and on_cuda
        self.compile_text_grad = _switch(pick(compile_text_grad, "COMPILE_TEXT_GRAD"),
                                         compile_all) and on_cuda
        # the text tower: SOS + context computed once per image, EOS-only last layer (exact;
        # argtca/engine/text_tower.py), where the tower has CLIP's form
        from argtca.engine.text_tower import PrefixSharedText, prefix_sharing_supported
        self.prefix_share = (bool(pick(prefix_share, "PREFIX_SHARE"))
                             and prefix_sharing_supported(text_encoder) is None)
        # not implied by TTA.COMPILE: Jᵀ is built once per dataset
        self.compile_jacobian = _switch(pick(compile_jacobian, "COMPILE_JACOBIAN"),
                                        False) and on_cuda
        self.jacobian_tf32 = bool(pick(jacobian_tf32, "JACOBIAN_TF32")) and on_cuda
        grad_mode = str(grad_mode or knobs.GRAD_MODE).lower()
        if grad_mode not in GRAD_MODES + ("auto",):
            raise ValueError(f"FastEngine grad_mode={grad_mode!r}: use one of "
                             f"{GRAD_MODES + ('auto',)}")
        self.grad_mode_why = ""
        if grad_mode == "auto":
            grad_mode, self.grad_mode_why = self._auto_grad_mode(n_images)
        self.grad_mode = grad_mode
        # "auto": "split" where the prefix is shared and the text tower runs forward only (grad
        # mode jacobian, or no steps), the fastest forward; else the efficient kernel, whose
        # backward is the fastest for the recompute/vjp modes
        forward_only = grad_mode == "jacobian" or self.steps <= 0
        text_attention = str(text_attention or knobs.TEXT_ATTENTION).lower()
        if text_attention == "auto":
            text_attention = "split" if self.prefix_share and forward_only else "efficient"
        if text_attention == "split" and not self.prefix_share:
            text_attention = "efficient"   # "split" needs the shared prefix
        if text_attention not in TEXT_ATTENTION:
            raise ValueError(f"FastEngine text_attention={text_attention!r}: use one of "
                             f"{('auto',) + tuple(TEXT_ATTENTION)}")
        self.text_attention = text_attention
        self.text = (PrefixSharedText(text_encoder, attention="split" if text_attention == "split"
                                      else "sdpa") if self.prefix_share else text_encoder)
        chunk = int(pick(image_chunk, "IMAGE_CHUNK"))
        self.image_chunk = chunk if chunk > 0 else min(
            2048, int(cfg.TTA.BATCH_IMAGES) * max(1, int(cfg.TTA.N_VIEWS)))
        self.text_tokens = int(text_tokens or knobs.TEXT_TOKENS)
        # fp16 autocast on CUDA: keep a copy of the frozen image tower stored in fp16 (no weight
        # or LayerNorm casts per call) with the patch embedding as a matmul
        # (argtca/engine/towers.py)
        self.half_image = bool(pick(half_image, "HALF_IMAGE")) and self.amp
        if self.half_image:
            from argtca.engine.towers import fast_image_tower
            encode = fast_image_tower(model.visual, torch.float16,
                                      lean_blocks=bool(pick(lean_image, "LEAN_IMAGE")),
                                      fold_gelu=bool(pick(fold_gelu, "FOLD_QUICKGELU")))
        else:
            encode = model.encode_image
        # torch.compile mode of the image tower (None = default; "max-autotune-no-cudagraphs"
        # lets Inductor autotune its matrix products with the bias/QuickGELU epilogues fused)
        self.compile_mode = compile_mode or knobs.COMPILE_MODE or None
        if self.compile_image:   # block by block: one compilation serves the 12 blocks
            from argtca.engine.towers import compile_blocks
            encode = compile_blocks(encode, mode=self.compile_mode)
        self._encode_image = encode
        compiled = (torch.compile(self.text.forward, dynamic=False)
                    if (self.compile_text or self.compile_text_grad) else None)
        self._encode_text = compiled if self.compile_text else self.text
        self._encode_text_grad = compiled if self.compile_text_grad else self.text
        self.batch_images = max(1, int(cfg.TTA.BATCH_IMAGES))
        # submit() queues a batch on the device without waiting (argtca/engine/pipeline.py)
        self.asynchronous = on_cuda
        # one CUDA graph per batch shape (argtca/engine/graphs.py): only where no compiled code
        # runs and step 1 differentiates no graph kept across batches (vjp/loop); "emulate"
        # (tests): the graph protocol on any device, without CUDA
        graphable = (not (self.compile_image or self.compile_text or self.compile_text_grad)
                     and (self.steps <= 0 or grad_mode in ("jacobian", "recompute")))
        # "auto" = off: the loop is bound by the GPU, the graph gains < 1 %
        # (benchmarks/README.md#known-limits-and-missed-targets)
        graph, self.graph_emulate = _graph_switch(pick(cuda_graph, "CUDA_GRAPH"), False, on_cuda)
        self.cuda_graph = graphable and graph
        self._in_graph = False   # inside a graph's warm-up or capture
        self._inputs = None       # the last eager batch's per-view objective inputs (RLCF)
        # the text tower's passes as CUDA graphs, one per shape (argtca/engine/text_graph.py):
        # the passes with gradient of the steps after the first (RLCF's 3-5 steps) and the final
        # prediction's; not where the pass is compiled, nor inside a whole-batch graph.
        # "emulate" (tests): the graphs' protocol on any device, without CUDA
        self.text_graph, self.text_graph_emulate = _graph_switch(
            pick(text_graph, "TEXT_GRAPH"), self.text_graph_auto, on_cuda)
        self.forget_dataset()

    def forget_dataset(self) -> None:
        """Drop what is computed once per dataset (θ0 text, cached regulariser, Jᵀ): the next
        batch or :meth:`prepare` computes it again. Compiled code is kept."""
        self._theta0 = None    # cached (ctx0 leaf [n, W], T0 [P, E] with graph)
        self._reg0 = None      # cached (reg(T0) [1], scale * d reg/dT at T0 [P, E])
        self._jt = None        # Jᵀ at θ0 [n·W, P·E] of grad_mode "jacobian"
        self._graphs = {}      # batch key -> GraphedBatch (they read the tensors above)
        self._graph_seen = set()   # batch keys run once eagerly (the warm-up before a capture)
        self._graphed_text = None  # the text tower's graphs (they read its buffers in place)

    # ------------------------------------------------------------------ helpers
    def autocast(self):
        """fp16 autocast as the reference's; without its cast cache while a graph is captured
        (a cached cast would outlive the capture). The same casts either way."""
        return autocast_ctx(self.device, self.prec, cache=not self._in_graph)

    def text_ctx(self):
        """Autocast plus the chosen attention kernel for the text tower (same maths)."""
        name = TEXT_ATTENTION[self.text_attention]
        if name is None or self.device.type != "cuda":
            return self.autocast()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        stack = contextlib.ExitStack()
        stack.enter_context(self.autocast())
        stack.enter_context(sdpa_kernel([getattr(SDPBackend, name)]))
        return stack

    def _text_backward_ctx(self):
        name = TEXT_ATTENTION[self.text_attention]
        if name is None or self.device.type != "cuda":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([getattr(SDPBackend, name)])

    def graphed_text(self, compiled: bool):
        """The text tower's calls as CUDA graphs (:class:`~argtca.engine.text_graph.GraphedText`
        of ``self.text``: forward, and backward to the context, one graph per shape), or None: the
        caller runs its eager (or ``compiled``) pass. Called inside :meth:`text_ctx`, whose
        attention kernel the capture records."""
        if not self.text_graph or compiled or self._in_graph:
            return None
        if self._graphed_text is None:
            from argtca.engine.reference import TunableText
            from argtca.engine.text_graph import GraphedText
            self._graphed_text = GraphedText(TunableText(self.text, self.amp, self.autocast),
                                             emulate=self.text_graph_emulate)
        return self._graphed_text

    @property
    def num_prompts(self) -> int:
        return int(self.text_encoder.num_prompts)

    def _images_per_text_call(self, grad: bool = True) -> int:
        """Images per text-tower call: at most ``text_tokens`` prompt tokens (x8 without
        gradient: nothing is kept for a backward pass), balanced over the calls of a batch so the
        compiled (padded) last call wastes little (K=1000 no-grad: 2 calls of 8, not 15 + 1)."""
        per_image = self.num_prompts * int(self.text_encoder.seq_len)
        budget = self.text_tokens * (1 if grad else 8)
        cap = max(1, min(self.batch_images, budget // max(1, per_image)))
        calls = -(-self.batch_images // cap)
        return -(-self.batch_images // calls)

    @staticmethod
    def _pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
        """Pad [n, ...] to ``rows`` rows by repeating row 0 (one compiled shape; the padded
        outputs are dropped, so they add exactly zero to any gradient)."""
        n = x.shape[0]
        return x if n >= rows else torch.cat([x, x[:1].expand(rows - n, *x.shape[1:])])

    @torch.no_grad()
    def image_features(self, views: torch.Tensor) -> torch.Tensor:
        """[B, V, 3, S, S] → normalised features [B, V, E] (fp32), ``image_chunk`` views a call."""
        B, V = views.shape[:2]
        flat = views.flatten(0, 1)
        out = []
        for i in range(0, flat.shape[0], self.image_chunk):
            x = flat[i:i + self.image_chunk].to(self.device, non_blocking=True)
            n = x.shape[0]
            if self.compile_image and n < self.image_chunk:
                # one compiled shape: pad the last chunk (rows are independent; pads dropped)
                x = torch.cat([x, x.new_zeros(self.image_chunk - n, *x.shape[1:])])
            if self.half_image:   # fp16 tower, fp16 input, no autocast
                out.append(self._encode_image(x.half())[:n])
                continue
            with self.autocast():
                out.append(self._encode_image(x)[:n])
        f = torch.cat(out) if len(out) > 1 else out[0]
        return F.normalize(f.float(), dim=-1).reshape(B, V, -1)

    def logits(self, img: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """img [B, V, E], text [B, P, E] → [B, V, P] (the reference's expression)."""
        return self.logit_scale * torch.einsum("bve,bpe->bvp", img.to(text.dtype), text)

    def text_features(self, ctx: torch.Tensor) -> torch.Tensor:
        """Text features [B, P, E] of contexts [B, n, W] (no grad), in chunks of images."""
        step = self._images_per_text_call(grad=False)
        out = []
        with torch.no_grad(), self.text_ctx():
            graphed = self.graphed_text(self.compile_text)
            for i in range(0, ctx.shape[0], step):
                x = ctx[i:i + step]
                n = x.shape[0]
                if graphed is not None:   # a replay's output is overwritten by the next one's
                    out.append(graphed(x).clone())
                    continue
                if self.compile_text:   # one compiled shape: pad, then drop
                    x = self._pad_rows(x, step)
                out.append(self._encode_text(x)[:n])
        return torch.cat(out) if len(out) > 1 else out[0]

    def theta0(self):
        """(ctx0 leaf [n, W], T0 = T(ctx0) [P, E] with its autograd graph), computed once."""
        if self._theta0 is None:
            ctx0 = self.text_encoder.ctx_init.detach().float().clone().requires_grad_(True)
            keep = self.steps > 0 and self.grad_mode in ("vjp", "loop")
            # the kept θ0 graph is differentiated many times (retain_graph): eager, never compiled
            enc = self.text if keep else self._encode_text
            with torch.set_grad_enabled(keep), self.text_ctx():
                t0 = enc(ctx0.unsqueeze(0))[0]
            self._theta0 = (ctx0, t0)
        return self._theta0

    def _uses_cached_regularizer(self) -> bool:
        o = self.objective
        return bool(o.text_only()) and type(o).loss is Objective.loss

    def regularizer0(self):
        """(reg(T0) [1], loss_scale · ∂reg/∂T at T0 [P, E]) for text-only regularisers, once."""
        if self._reg0 is None:
            t = self.theta0()[1].detach().unsqueeze(0).requires_grad_(True)
            with torch.enable_grad():
                reg = self.objective.regularizer(t.float())
                g = None
                if reg.requires_grad:  # TPT's zero regulariser has no graph
                    g, = torch.autograd.grad(reg, t, allow_unused=True,
                                             grad_outputs=torch.full_like(reg, self.loss_scale))
            if g is None:
                g = torch.zeros_like(t)
            self._reg0 = (reg.detach(), g[0].detach())
        return self._reg0

    # ------------------------------------------------------------------ the episode
    def tune(self, img: torch.Tensor, paths: Optional[Sequence[str]] = None,
             inputs=None) -> torch.Tensor:
        """TTA.STEPS AdamW steps from θ0 for every image; returns the tuned contexts [B, n, W].
        ``inputs``: the objective's per-view inputs [B, V, ...] (``Objective.view_inputs``)."""
        ctx, first_bad, bad_seen = self._tune_async(img, inputs)
        if first_bad is not None:
            self._check_finite(first_bad, bad_seen, paths, img, inputs)
        return ctx

    def _tune_async(self, img: torch.Tensor, inputs=None):
        """The steps without any host synchronisation: (ctx [B, n, W], first non-finite loss [B],
        seen [B] bool) — the last two None without steps; checked by the caller."""
        B = img.shape[0]
        ctx0 = self.text_encoder.ctx_init.detach().float()
        ctx = ctx0.unsqueeze(0).repeat(B, 1, 1).requires_grad_(True)
        if self.steps <= 0:
            return ctx.detach(), None, None
        # in a CUDA graph the step count lives on the device (capture needs it there)
        capturable = self._in_graph and ctx.device.type == "cuda"
        opt = torch.optim.AdamW([ctx], lr=self.lr, weight_decay=self.wd, capturable=capturable)
        first_bad = torch.zeros(B, device=img.device)
        bad_seen = torch.zeros(B, dtype=torch.bool, device=img.device)
        sel_idx = None
        for s in range(self.steps):
            if s == 0 and self.grad_mode != "recompute":
                loss, cot, sel_idx = self._step1_cotangent(img, self.selection_p, inputs)
                g = self._vjp_theta0(cot)
            else:
                loss, g, sel_idx = self._grad_recompute(ctx, img, sel_idx, inputs)
            first_bad, bad_seen = self._record_bad(loss, first_bad, bad_seen)
            if self.loss_scale != 1.0:
                g = g / self.loss_scale
            ok = torch.isfinite(g).flatten(1).all(-1)[:, None, None]
            ctx.grad = torch.where(ok, g, torch.zeros_like(g))
            before = ctx.detach().clone()
            opt.step()
            with torch.no_grad():
                ctx.copy_(torch.where(ok, ctx, before))
        return ctx.detach(), first_bad, bad_seen

    @torch.no_grad()
    def predict(self, img0: torch.Tensor, ctx: Optional[torch.Tensor]) -> torch.Tensor:
        """img0 [B, E] (view-0 features), ctx [B, n, W] or None (= θ0) → probabilities [B, K]."""
        if ctx is None:
            t0 = self.theta0()[1].detach()
            text = t0.unsqueeze(0).expand(img0.shape[0], -1, -1)
        else:
            text = self.text_features(ctx)
        with self.autocast():
            logits = self.logits(img0.unsqueeze(1), text)
        return self.objective.probs(logits.float())[:, 0]

    @torch.no_grad()
    def final(self, img: torch.Tensor, ctx: Optional[torch.Tensor]) -> torch.Tensor:
        """The prediction after tuning: view 0's, or the objective's rule over every view's logits
        (``objective.all_views``: R-TPT's reliability-weighted ensemble)."""
        if not getattr(self.objective, "all_views", False):
            return self.predict(img[:, 0], ctx)
        if ctx is None:
            text = self.theta0()[1].detach().unsqueeze(0).expand(img.shape[0], -1, -1)
        else:
            text = self.text_features(ctx)
        with self.autocast():
            logits = self.logits(img, text)
        return self.objective.final(logits.float(), img)

    def __call__(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> torch.Tensor:
        img = self.image_features(views)
        ctx = (self.tune(img, paths, self.objective.view_inputs(views)) if self.steps > 0
               else None)
        probs = self.final(img, ctx)
        raise_if_non_finite_probs(probs, paths, self.hint)
        return probs

    def prepare(self) -> None:
        """Everything computed once per dataset (T0, the text-only regulariser, Jᵀ at θ0), so a
        caller can overlap it with the loader's start
        (:func:`argtca.engine.pipeline.predictions`)."""
        self.theta0()
        if self.steps > 0 and self._uses_cached_regularizer():
            self.regularizer0()
        if self.needs_jacobian():
            self.jacobian_t()
