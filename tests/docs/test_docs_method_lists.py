"""The docs' lists of methods are the catalogue's (argtca/trainers/catalogue.py): each marked list
(tests/docs/method_lists.py) is what its spec gives today, no list of four or more method names
is left unmarked in README.md, docs/*.md, the scripts' comments or argtca's docstrings and
comments, and a Dassl user is told of every trainer that is registered into Dassl."""
import io
import tokenize

import pytest

import method_lists as ml
from argtca.trainers.catalogue import catalogue, method_names, method_sets


@pytest.mark.parametrize("path", ml.doc_files(), ids=lambda p: p.name)
def test_marked_lists_are_the_catalogues(path):
    text = path.read_text()
    for m in ml.marked(text):
        line = text.count("\n", 0, m.start()) + 1
        if m["spec"] == "as-is":   # a deliberate subset: every name still a method's
            words = set(ml.method_words())
            names = [w.strip("*` ") for w in m["body"].replace(" and ", ", ").split(",")]
            assert all(n in words for n in names), f"{path.name}:{line}: {names}"
            continue
        assert m["body"] == ml.render(m["spec"]), (
            f"{path.name}:{line}: <!-- methods:{m['spec']} --> reads {m['body']!r}, the "
            f"catalogue gives {ml.render(m['spec'])!r}: python tests/docs/method_lists.py --write")


def _comments_and_strings(path):
    """The prose of a .py file (its strings and comments) or of a shell script (its comments)."""
    if path.suffix == ".sh":
        return "\n".join(ln for ln in path.read_text().splitlines() if ln.lstrip().startswith("#"))
    toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return "\n".join(t.string for t in toks if t.type in (tokenize.STRING, tokenize.COMMENT))


def test_no_list_of_methods_is_written_by_hand():
    files = (ml.doc_files() + sorted((ml.REPO / "scripts").glob("*.sh"))
             + sorted((ml.REPO / "argtca").rglob("*.py")))
    found = []
    for path in files:
        text = path.read_text() if path.suffix == ".md" else _comments_and_strings(path)
        found += [f"{path.relative_to(ml.REPO)}: {body!r}" for _, body in ml.unmarked_lists(text)]
    assert not found, ("lists of methods written by hand (they drift: mark them, "
                       "tests/docs/method_lists.py): " + "; ".join(found))


def test_the_scanner_finds_a_drifted_list_and_the_specs_read_the_catalogue():
    """The check can fail: the online list the docs had (4 of today's online methods) is found;
    the specs give the catalogue's own numbers and names."""
    drifted = "The online methods (TDA, DMN-ZS, BoostAdapter, DPE) see one stream."
    assert [body for _, body in ml.unmarked_lists(drifted)] == ["TDA, DMN-ZS, BoostAdapter, DPE"]
    marked = drifted.replace("TDA, DMN-ZS, BoostAdapter, DPE",
                             "<!-- methods:all/online -->TDA, DMN-ZS, BoostAdapter, DPE"
                             "<!-- /methods -->")
    assert list(ml.unmarked_lists(marked)) == []
    (body,) = [m["body"] for m in ml.marked(ml.rewrite(marked))]
    assert len(body.replace(" and ", ", ").split(", ")) == len(method_names("online"))
    assert ml.render("count:all") == str(len(method_sets()["all"]))
    assert ml.render("count:keys") == str(len(catalogue()))
    assert ml.render("variants") == " and ".join(m.label for m in catalogue() if not m.rows)


def test_dassl_users_are_told_every_registered_trainer():
    """Every trainer argtca registers into Dassl (argtca/dassl_plugin: every registered trainer,
    under its Dassl name) is named in docs/dassl.md's marked list."""
    from argtca.dassl_plugin import dassl_name
    text = (ml.REPO / "docs" / "dassl.md").read_text()
    (body,) = [m["body"] for m in ml.marked(text) if m["spec"].startswith("dassl")]
    assert {n.strip("` ") for n in body.replace(" and ", ", ").split(",")} == {
        dassl_name(m.trainer) for m in catalogue()}
