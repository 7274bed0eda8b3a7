"""Attribute vocabularies in the TCA authors' format.

File format (``rhebbalaguppe/TCA_PromptWithoutPanic``, folder ``TCA/Attributes``,
``<Dataset>_2_V.json``): one JSON object, class name -> one string of space-separated attributes,
most relevant first; multi-word attributes are hyphenated ("big-cat").

The lists are LLM output and noisy (repeats, "None", the class name itself). ``dedupe=True`` drops
repeated attributes of a class (first occurrence kept, compared after lower-casing and trimming);
nothing else is filtered.
"""
from .files import (AttributeFileError, attribute_file_for, attribute_file_hash, dedupe_attributes,
                    load_attributes, normalize_attribute)

__all__ = ["AttributeFileError", "load_attributes", "attribute_file_hash", "normalize_attribute",
           "dedupe_attributes", "attribute_file_for"]
