"""The shared per-class cache of TDA, BoostAdapter and DPE by hand: the priority rule (the lowest
entropies kept, sorted; a full class replaced only on a strictly lower entropy; ties keep the
earlier entry), the FIFO rule, the gate, and the masked read-out."""
import math

import torch

from argtca.adapters.cache import (cache_logits, entries, fifo_push, new_cache, priority_push,
                                   weights, widen)

A, B, C, D = (torch.tensor(v) for v in ([1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]))


def test_priority_push_by_hand():
    q = new_cache(3, 2, 2, "cpu")
    priority_push(q, 1, A, 0.5)
    priority_push(q, torch.tensor(1), B, torch.tensor(0.5))   # a tie: the later one sorts last
    assert q["count"].tolist() == [0, 2, 0]
    assert torch.equal(q["keys"][1], torch.stack([A, B]))
    priority_push(q, 1, C, 0.7)           # full, higher entropy: nothing changes
    assert torch.equal(q["keys"][1], torch.stack([A, B]))
    assert q["entropy"][1].tolist() == [0.5, 0.5]
    priority_push(q, 1, D, 0.2)           # strictly lower: first; the later of the tie (B) drops
    assert torch.equal(q["keys"][1], torch.stack([D, A]))
    assert [round(x, 6) for x in q["entropy"][1].tolist()] == [0.2, 0.5]
    priority_push(q, 1, C, 0.5)           # full, equal to the highest: the earlier entry stays
    assert torch.equal(q["keys"][1], torch.stack([D, A]))
    priority_push(q, 1, C, 0.1, gate=torch.tensor(False))    # gated off: nothing
    assert torch.equal(q["keys"][1], torch.stack([D, A])) and q["count"].tolist() == [0, 2, 0]
    assert not q["keys"][0].any() and not q["keys"][2].any()

    # the read-out for f = e1, beta 2: D gives exp(-2 (1 - 0.8)), A exp(0); empty slots give 0
    w = weights(q, A, 2.0)
    assert torch.allclose(w, torch.tensor([[0.0, 0.0], [math.exp(-0.4), 1.0], [0.0, 0.0]]))
    assert torch.allclose(cache_logits(q, A, 2.0), torch.tensor([0.0, math.exp(-0.4) + 1, 0.0]))
    keys, classes = entries(q)
    assert torch.equal(keys, torch.stack([D, A])) and classes.tolist() == [1, 1]

    # a widened copy (BoostAdapter's per-image cache) has room for one more; the original does not
    wide = widen(q, 3)
    priority_push(wide, 1, B, 0.3)
    assert torch.equal(wide["keys"][1], torch.stack([D, B, A])) and wide["count"][1] == 3
    assert torch.equal(q["keys"][1], torch.stack([D, A])) and q["count"][1] == 2


def test_fifo_push_by_hand():
    q = new_cache(2, 2, 2, "cpu", fifo=True, payload={"prob": (2,)})
    assert "entropy" not in q
    p1, p2, p3 = torch.tensor([0.9, 0.1]), torch.tensor([0.6, 0.4]), torch.tensor([0.2, 0.8])
    fifo_push(q, 0, A, prob=p1)
    fifo_push(q, 0, B, prob=p2)
    assert q["count"].tolist() == [2, 0]
    fifo_push(q, 0, C, prob=p3)           # full: the oldest (A) drops, whatever its confidence
    assert torch.equal(q["keys"][0], torch.stack([B, C]))
    assert torch.equal(q["prob"][0], torch.stack([p2, p3]))
    fifo_push(q, 0, D, gate=torch.tensor(False), prob=p1)
    assert torch.equal(q["keys"][0], torch.stack([B, C])) and q["count"].tolist() == [2, 0]
    fifo_push(q, 1, D, prob=p1)
    # Σ w · value for f = e2, beta 1: B (w 1) carries p2, C (w exp(-0.2)) p3, D (w exp(-0.4)) p1
    w_c, w_d = math.exp(-0.2), math.exp(-0.4)
    want = torch.tensor([0.6 + w_c * 0.2 + w_d * 0.9, 0.4 + w_c * 0.8 + w_d * 0.1])
    assert torch.allclose(cache_logits(q, B, 1.0, q["prob"]), want)
