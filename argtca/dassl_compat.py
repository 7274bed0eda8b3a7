"""The one line a CoOp user adds to CoOp's ``train.py`` (anywhere among its imports):

    import argtca.dassl_compat

It registers every trainer of argtca's catalogue into Dassl under its class name (``python -m
argtca.trainers.catalogue --table``; the zero-shot one as ``ArgtcaZeroshotCLIP``: CoOp owns
``ZeroshotCLIP``), the methods of the plug-ins in ``$ARGTCA_PLUGINS``, argtca's ``Demo`` dataset,
and adds argtca's config keys to Dassl's defaults, so CoOp's ``extend_cfg`` needs no change. The
CoOp datasets are CoOp's own classes. See docs/dassl.md and
:mod:`argtca.dassl_plugin`.

Without Dassl installed this module only provides ``extend_cfg`` and ``HAVE_DASSL = False``.
"""
from __future__ import annotations

from argtca.dassl_plugin.config import extend_cfg  # noqa: F401

try:
    import dassl.engine  # noqa: F401
    HAVE_DASSL = True
except ImportError as _e:  # Dassl is not on PyPI: see the README for installing it
    if (_e.name or "").split(".")[0] != "dassl":
        raise   # Dassl is there but one of its own imports failed: show that error
    HAVE_DASSL = False

if HAVE_DASSL:
    from argtca.dassl_plugin import DASSL_TRAINER_NAMES, install  # noqa: F401
    REGISTERED = install()
