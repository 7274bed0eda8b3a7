"""``python -m argtca.experiments`` called in the test's process, its output captured."""
import contextlib
import io

from argtca.experiments.__main__ import main


def call(argv):
    """(exit status, stdout, stderr) of ``python -m argtca.experiments ARGV``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()
