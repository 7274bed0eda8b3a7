"""Data doctor (``python -m argtca.data check``) and downloader
(``python -m argtca.data download``); see ``argtca/data/__main__.py``. Dataset loaders live in
:mod:`argtca.datasets`."""
