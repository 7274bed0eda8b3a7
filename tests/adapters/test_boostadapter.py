"""BoostAdapter: the historical cache, the boosting samples and the negative cache recomputed
with the official code's list-based caches (runner.py / utils.py of taolinzhang/BoostAdapter,
rewritten here in plain Python) on hand-made features; state save/restore mid-stream; the demo."""
import copy
import io
import math
import operator
import os

import torch
import torch.nn.functional as F

from argtca.adapters.boostadapter import BoostAdapter
from argtca.config import get_cfg_default

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K, E, S = 3, 4, 10.0
TEXT = torch.eye(K, E)


def make(**node):
    cfg = get_cfg_default()
    cfg.TTA.SELECTION_P = 0.2
    for k, v in node.items():
        cfg.TRAINER.BOOSTADAPTER[k] = v
    return BoostAdapter(cfg.TRAINER.BOOSTADAPTER, cfg, TEXT, S)


def views(spec):
    """A hand-made image: rows (c, a) -> normalize(a·e_c + 0.6·e_4 + 0.2·e_{c+1 mod 3})."""
    rows = []
    for c, a in spec:
        v = torch.zeros(E)
        v[c], v[3], v[(c + 1) % K] = a, 0.6, 0.2
        rows.append(v)
    return F.normalize(torch.stack(rows), dim=-1)


STREAM = [views([(0, 1.0), (0, 3.0), (1, 0.5), (0, 2.0), (2, 0.4), (0, 0.3), (1, 0.2),
                 (2, 0.1), (0, 0.6), (1, 0.7)]),
          views([(1, 0.8), (1, 0.4), (1, 2.5), (0, 4.0), (2, 0.3), (1, 0.1), (0, 0.2),
                 (2, 0.5), (1, 0.9), (0, 0.3)]),
          views([(0, 0.35), (0, 0.2), (2, 0.9), (0, 0.5), (1, 0.3), (2, 0.1), (0, 0.1),
                 (1, 0.4), (2, 0.6), (0, 1.5)]),
          views([(2, 1.2), (2, 0.7), (2, 3.0), (1, 0.6), (0, 0.2), (2, 0.2), (1, 0.3),
                 (0, 0.9), (2, 0.4), (1, 0.25)]),
          views([(0, 0.9), (1, 0.3), (0, 5.0), (2, 0.2), (0, 0.1), (1, 2.0), (2, 0.6),
                 (0, 0.4), (1, 0.2), (2, 0.3)]),
          # three less confident class-0 images: the negative cache of class 0 overflows (FIFO
          # keeps the last two, not the two most confident) and so does its history (priority)
          views([(0, 0.33), (0, 1.0), (1, 0.3), (2, 0.2), (0, 0.2), (1, 0.6), (2, 0.3),
                 (0, 0.8), (1, 0.1), (2, 0.5)]),
          views([(0, 0.32), (2, 0.9), (1, 0.35), (0, 0.6), (2, 0.2), (0, 2.2), (1, 0.5),
                 (2, 0.15), (0, 0.3), (1, 0.8)]),
          views([(0, 0.3), (1, 1.1), (0, 0.7), (2, 0.25), (1, 0.45), (0, 0.15), (2, 1.3),
                 (1, 0.2), (0, 0.5), (2, 0.35)])]


# ------------------------------------------- the official algorithm, list-based, in plain Python
def ent(logits):
    p = [math.exp(x - max(logits)) for x in logits]
    z = sum(p)
    return -sum(q / z * math.log(q / z) for q in p)


def update(cache, pred, item, cap, fifo):
    if pred in cache:
        cache[pred].append(item)
        if fifo:
            if len(cache[pred]) > cap:
                cache[pred] = cache[pred][1:]
        else:
            cache[pred] = sorted(cache[pred], key=operator.itemgetter(1))[:cap]
    else:
        cache[pred] = [item]


def cache_logits(f, cache, alpha, beta, neg_mask=None):
    out = [0.0] * K
    for c in sorted(cache):
        for item in cache[c]:
            w = math.exp(-beta * (1 - sum(a * b for a, b in zip(f, item[0]))))
            for k in range(K):
                val = (neg_mask[0] < item[2][k] < neg_mask[1]) if neg_mask else (k == c)
                out[k] += alpha * w * val
    return out


def reference(stream, alpha, beta, delta, original=True, p=0.2):
    pos, neg, outs = {}, {}, []
    for img in stream:
        feats = img.tolist()
        logits = [[S * sum(a * b for a, b in zip(f, t)) for t in TEXT.tolist()] for f in feats]
        ents = [ent(lg) for lg in logits]
        if original:
            f, l, h = feats[0], logits[0], ents[0]
            prob = [math.exp(x - max(l)) for x in l]
            prob = [q / sum(prob) for q in prob]
        else:
            n = int(len(feats) * p)
            sel = sorted(range(len(feats)), key=lambda i: ents[i])[:n]
            f = [sum(feats[i][e] for i in sel) / n for e in range(E)]
            l = [sum(logits[i][k] for i in sel) / n for k in range(K)]
            probs = []
            for i in sel:
                q = [math.exp(x - max(logits[i])) for x in logits[i]]
                probs.append([x / sum(q) for x in q])
            prob = [sum(q[k] for q in probs) / n for k in range(K)]
            h = -sum(x * math.log(x) for x in prob)
        pred = max(range(K), key=lambda k: l[k])
        update(pos, pred, [f, h], 3, fifo=False)
        boosted = copy.deepcopy(pos)
        for i in sorted(range(len(feats)), key=lambda i: ents[i])[:int(len(feats) * p)]:
            c = max(range(K), key=lambda k: logits[i][k])
            update(boosted, c, [feats[i], ents[i]], 3 + delta, fifo=False)
        if 0.2 < h / math.log2(K) < 0.5:
            update(neg, pred, [f, h, prob], 2, fifo=True)
        out = [a + b for a, b in zip(l, cache_logits(f, boosted, alpha, beta))]
        if neg:
            out = [a - b for a, b in zip(out, cache_logits(f, neg, 0.117, 1.0, (0.03, 1.0)))]
        outs.append(torch.tensor(out, dtype=torch.float64).softmax(-1))
    return torch.stack(outs), pos, neg


def test_boosting_samples_are_the_lowest_entropy_views():
    # image 1: view 1 (a=3.0) and view 3 (a=2.0) are the most confident of its 10 views; with
    # SELECTION_P 0.2 they are its boosting samples, both class 0 (the cache of class 0 then
    # holds view 0, view 1 and view 3 for this image only)
    logits = S * STREAM[0] @ TEXT.t()
    h = [ent(row) for row in logits.tolist()]
    assert sorted(range(10), key=lambda i: h[i])[:2] == [1, 3]
    a = make(ALPHA=2.0, BETA=5.0, DELTA=0)
    a.step(STREAM[0])
    keys, classes = a.boosted_entries(logits, STREAM[0])
    assert classes.tolist() == [0, 0, 0]
    # sorted by entropy: view 1 (most confident), view 3, then the image itself (view 0)
    assert torch.allclose(keys, STREAM[0][[1, 3, 0]])
    # DELTA 0: the per-image cache of class 0 keeps 3 entries, DELTA 1 keeps all 4
    a = make(ALPHA=2.0, BETA=5.0, DELTA=0)
    a.step(STREAM[0])
    a.step(STREAM[2])     # class 0 again: view 0 of image 3 joins the history
    k0, c0 = a.boosted_entries(S * STREAM[0] @ TEXT.t(), STREAM[0])
    assert (c0 == 0).sum() == 3
    b = make(ALPHA=2.0, BETA=5.0, DELTA=1)
    b.step(STREAM[0])
    b.step(STREAM[2])
    k1, c1 = b.boosted_entries(S * STREAM[0] @ TEXT.t(), STREAM[0])
    assert (c1 == 0).sum() == 4


def test_final_probabilities_equal_the_official_rule():
    for alpha, beta, delta, original in ((2.0, 5.0, 0, True), (5.0, 3.0, 2, True),
                                         (1.0, 8.0, 1, False)):
        a = make(ALPHA=alpha, BETA=beta, DELTA=delta,
                 HISTORY_VIEWS="original" if original else "confident")
        got = torch.stack([a.step(img) for img in STREAM])
        want, pos, neg = reference(STREAM, alpha, beta, delta, original)
        assert torch.allclose(got.double(), want, atol=1e-5), (got, want)
        # the caches hold the official entries, in the official order
        for state, cache in ((a.state["pos"], pos), (a.state["neg"], neg)):
            assert int((state["count"] > 0).sum()) == len(cache)
            for c, items in cache.items():
                n = int(state["count"][c])
                assert torch.allclose(state["keys"][c, :n].double(),
                                      torch.tensor([it[0] for it in items], dtype=torch.float64),
                                      atol=1e-6)
        if original:
            # view 0 overflowed class 0 in both caches: the history kept its 3 most confident
            # images, the negative cache (FIFO) its last 2, which are not its 2 most confident
            assert len(pos[0]) == 3 and len(neg[0]) == 2
            assert [round(it[1], 3) for it in neg[0]] == [0.48, 0.546]


def test_presets_follow_the_dataset_and_explicit_values_win():
    cfg = get_cfg_default()
    cfg.DATASET.NAME = "DescribableTextures"
    a = BoostAdapter(cfg.TRAINER.BOOSTADAPTER, cfg, TEXT, S)
    assert (a.alpha, a.beta, a.delta, a.history_views) == (2.0, 3.0, 0, "original")
    cfg.DATASET.NAME = "ImageNetA"
    cfg.TRAINER.BOOSTADAPTER.BETA = 4.0
    a = BoostAdapter(cfg.TRAINER.BOOSTADAPTER, cfg, TEXT, S)
    assert (a.alpha, a.beta, a.delta, a.history_views) == (2.0, 4.0, 3, "confident")


def test_state_round_trip_mid_stream_continues_identically():
    a = make(ALPHA=2.0, BETA=5.0, DELTA=1)
    for img in STREAM[:3]:
        a.step(img)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    b = make(ALPHA=2.0, BETA=5.0, DELTA=1)
    buf.seek(0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    for img in STREAM[3:] + STREAM[:2]:
        assert torch.equal(a.step(img), b.step(img))
