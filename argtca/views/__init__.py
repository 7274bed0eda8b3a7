"""Test-time views (TPT's augmented views of one test image): made with PIL on the CPU
(:mod:`argtca.views.cpu`, the dataset and its loaders in :mod:`argtca.views.dataset`, AugMix in
:mod:`argtca.views.augmix`) or on the device
(:mod:`argtca.views.gpu` with :mod:`argtca.views.gpu_ops`, the workers' side in
:mod:`argtca.views.gpu_host`), fed to the test loop by :mod:`argtca.views.loader`."""
