"""DPE: the priority queue and the visual prototypes (normalised means), one residual step
recomputed with an independent autograd of the paper's loss and AdamW's first step worked out by
hand, the textual prototypes' cumulative mean, the confident views, state save/restore
mid-stream and the demo."""
import io
import math
import os

import torch
import torch.nn.functional as F

from argtca.adapters.cache import new_cache as new_queue, priority_push as queue_push
from argtca.adapters.dpe import DPE
from argtca.config import get_cfg_default

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K, E, S = 3, 4, 10.0
TEXT = F.normalize(torch.tensor([[1.0, 0.1, 0.0, 0.2], [0.0, 1.0, 0.2, 0.1],
                                 [0.1, 0.0, 1.0, 0.3]]), dim=-1)


def make(**node):
    cfg = get_cfg_default()
    cfg.TTA.SELECTION_P = 0.5
    node = dict(dict(ALPHA=6.0, BETA=5.0, LR_TEXT=0.01, LR_IMAGE=0.02, ALIGN=0.5), **node)
    for k, v in node.items():
        cfg.TRAINER.DPE[k] = v
    return DPE(cfg.TRAINER.DPE, cfg, TEXT, S)


def unit(*x):
    return F.normalize(torch.tensor([x], dtype=torch.float32), dim=-1)


def test_queue_keeps_the_lowest_entropy_entries_and_prototype_is_their_mean():
    q = new_queue(K, 3, E, "cpu")
    feats = [unit(1, 0, 0, 0)[0], unit(0, 1, 0, 0)[0], unit(0, 0, 1, 0)[0], unit(0, 0, 0, 1)[0]]
    for f, h in zip(feats, (0.5, 0.2, 0.4, 0.1)):
        queue_push(q, 1, f, h)
    # capacity 3: the 0.5 entry (feature e1) is dropped; sorted 0.1 (e4), 0.2 (e2), 0.4 (e3)
    assert q["count"].tolist() == [0, 3, 0]
    assert [round(x, 6) for x in q["entropy"][1].tolist()] == [0.1, 0.2, 0.4]
    assert torch.equal(q["keys"][1], torch.stack([feats[3], feats[1], feats[2]]))
    queue_push(q, 1, feats[0], 0.3)       # beats 0.4
    assert [round(x, 6) for x in q["entropy"][1].tolist()] == [0.1, 0.2, 0.3]
    a = make()
    a.state["queue"] = q
    queue_push(q, 2, feats[2], 0.7)
    protos, classes = a.prototypes()
    assert classes.tolist() == [1, 2]
    assert torch.allclose(protos[0], torch.tensor([1.0, 1.0, 0.0, 1.0]) / 3)
    assert torch.allclose(protos[1], feats[2])


def expected_step(T, queue_items, f0, alpha, beta, lr_t, lr_v, lam, eps=1e-3):
    """One image by hand: the loss of the paper (entropy + lam * InfoNCE) differentiated by
    autograd on fresh leaves, AdamW's first step from zero (m̂ = g, v̂ = g², decay of 0 is 0):
    r = -lr · g / (|g| + eps); then the prediction with the tuned prototypes."""
    classes = sorted(queue_items)
    P = torch.stack([torch.stack(queue_items[c]).mean(0) for c in classes])
    onehot = torch.zeros(len(classes), K)
    for i, c in enumerate(classes):
        onehot[i, c] = 1.0
    r_t = torch.zeros(K, E, requires_grad=True)
    r_v = torch.zeros(len(classes), E, requires_grad=True)
    W = (T + r_t) / (T + r_t).norm(dim=1, keepdim=True)
    Pn = (P + r_v) / (P + r_v).norm(dim=1, keepdim=True)
    z = S * W @ f0 + alpha * torch.exp(-beta * (1 - Pn @ f0)) @ onehot
    p = torch.exp(z - torch.logsumexp(z, 0))
    H = -(p * torch.log(p)).sum()
    sim = Pn @ W[classes].t() / 0.01
    nce = -(torch.diagonal(sim) - torch.logsumexp(sim, 1)).mean()
    (H + lam * nce).backward()
    g_t, g_v = r_t.grad, r_v.grad
    W1 = F.normalize(T - lr_t * g_t / (g_t.abs() + eps), dim=1)
    P1 = F.normalize(P - lr_v * g_v / (g_v.abs() + eps), dim=1)
    z1 = S * W1 @ f0 + alpha * torch.exp(-beta * (1 - P1 @ f0)) @ onehot
    return z1.softmax(0), W1, z1


def test_one_residual_step_and_text_evolution_by_hand():
    a = make()
    f1 = unit(0.9, 0.1, 0.0, 0.2)[0]          # class 0, confident
    f2 = unit(0.55, 0.62, 0.1, 0.2)[0]        # class 1, close to class 0: InfoNCE not saturated
    # image 1: the queue holds f1 alone (class 0); InfoNCE over one prototype is 0
    want1, W1, z1 = expected_step(TEXT, {0: [f1]}, f1, 6.0, 5.0, 0.01, 0.02, 0.5)
    got1 = a.step(f1[None])
    assert torch.allclose(got1, want1, atol=1e-5)
    # the residual moved class 0's text towards the image (entropy minimisation)
    assert float(W1[0] @ f1) > float(TEXT[0] @ f1)
    # confident (entropy / log2 K < 0.1): T evolves to the mean of the start text and W1
    h = float(-(z1.softmax(0) * z1.log_softmax(0)).sum()) / math.log2(K)
    assert h < 0.1 and a.state["n_avg"] == 1
    T2 = TEXT / 2 + W1 / 2
    assert torch.allclose(a.state["text"], T2, atol=1e-5)
    # image 2: scored with normalize(T2); two prototypes, the alignment term is live
    want2, W2, z2 = expected_step(T2, {0: [f1], 1: [f2]}, f2, 6.0, 5.0, 0.01, 0.02, 0.5)
    got2 = a.step(f2[None])
    assert torch.allclose(got2, want2, atol=1e-5)
    # confident again: the cumulative mean of three (start text, W1, W2)
    h2 = float(-(z2.softmax(0) * z2.log_softmax(0)).sum()) / math.log2(K)
    assert h2 < 0.1 and a.state["n_avg"] == 2
    assert torch.allclose(a.state["text"], T2 * 2 / 3 + W2 / 3, atol=1e-5)
    # without the step (lr 0) the prediction is CLIP's plus the prototype cache
    b = make(LR_TEXT=0.0, LR_IMAGE=0.0)
    z = S * TEXT @ f1 + 6.0 * torch.exp(-5.0 * (1 - f1 @ f1)) * torch.tensor([1.0, 0, 0])
    assert torch.allclose(b.step(f1[None]), z.softmax(0), atol=1e-6)


def test_confident_views_feed_the_queue_and_view0_the_prediction():
    a = make(VIEWS="confident", LR_TEXT=0.0, LR_IMAGE=0.0)
    img = torch.cat([unit(0.3, 0.2, 0.25, 0.1), unit(1.0, 0.05, 0.0, 0.1),
                     unit(0.2, 0.3, 0.3, 0.2), unit(0.9, 0.0, 0.1, 0.0)])
    probs = a.step(img)
    # SELECTION_P 0.5 of 4 views: the two most confident (views 1 and 3) are averaged, not
    # re-normalised, into the queue of class 0
    mean = (img[1] + img[3]) / 2
    assert a.state["queue"]["count"].tolist() == [1, 0, 0]
    assert torch.allclose(a.state["queue"]["keys"][0, 0], mean)
    P = F.normalize(mean, dim=0)
    z = S * TEXT @ img[0] + 6.0 * torch.exp(-5.0 * (1 - P @ img[0])) * torch.tensor([1.0, 0, 0])
    assert torch.allclose(probs, z.softmax(0), atol=1e-6)


def test_presets_follow_the_dataset():
    cfg = get_cfg_default()
    cfg.DATASET.NAME = "StanfordCars"
    a = DPE(cfg.TRAINER.DPE, cfg, TEXT, S)
    assert (a.alpha, a.beta, a.lr_text, a.lr_image, a.align) == (3.0, 7.0, 1e-4, 1e-4, 1.5)
    assert (a.views, a.predict_views) == ("original", "original")
    cfg.DATASET.NAME = "ImageNetA"
    a = DPE(cfg.TRAINER.DPE, cfg, TEXT, S)
    assert (a.alpha, a.align, a.views, a.predict_views) == (6.0, 2.5, "confident", "confident")


def test_state_round_trip_mid_stream_continues_identically():
    g = torch.Generator().manual_seed(0)
    stream = [F.normalize(torch.randn(6, E, generator=g) + TEXT[i % K], dim=-1)
              for i in range(8)]
    a = make(VIEWS="confident")
    for img in stream[:4]:
        a.step(img)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    b = make(VIEWS="confident")
    buf.seek(0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    for img in stream[4:]:
        assert torch.equal(a.step(img), b.step(img))
