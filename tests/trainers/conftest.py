import pytest

from helpers_data import make_caltech, write_attributes


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A Caltech101-layout folder (3 classes) and an attribute file for its classes."""
    root = tmp_path_factory.mktemp("caltech")
    make_caltech(root / "data")
    return root / "data", write_attributes(root / "attrs.json")
