"""Attribute vocabularies: TCA-format files (:mod:`argtca.attributes.files`: reading, checking and
finding a dataset's file) and LLM-generated ones (``python -m argtca.attributes generate``)."""
from .files import (AttributeFileError, attribute_file_for, attribute_file_hash, dedupe_attributes,
                    load_attributes, normalize_attribute)

__all__ = ["AttributeFileError", "load_attributes", "attribute_file_hash", "normalize_attribute",
           "dedupe_attributes", "attribute_file_for"]
