"""argtca: calibrated test-time adaptation of CLIP: ArgTCA and the methods it is compared with
(every one: ``python -m argtca.trainers.catalogue --table``)."""
__version__ = "0.1.0"
