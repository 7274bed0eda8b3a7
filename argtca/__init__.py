"""argtca: calibrated test-time adaptation of CLIP (ArgTCA, TCA, TPT, C-TPT, O-TPT, A-TPT)."""
__version__ = "0.1.0"
