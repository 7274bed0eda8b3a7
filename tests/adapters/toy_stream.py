"""The short stream that the memory and cache adapters' tests (DMN-ZS, dmn_weak, TDA) work out by
hand with numpy: K = 3 classes, E = 4, class k's text feature is the axis e_k, and four images."""
import numpy as np

TEXT = np.eye(3, 4)                         # K = 3 classes, E = 4: class k is the axis e_k
RAW = {1: [1, .5, .2, .3], 2: [.2, 1, .1, .4], 3: [1, .1, .1, .1], 4: [.8, .6, .1, .2]}
FEATURES = {i: np.array(v, float) / np.linalg.norm(v) for i, v in RAW.items()}


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()
