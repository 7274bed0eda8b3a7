"""``python -m argtca.attributes generate ...``: see :mod:`argtca.attributes.generate`."""
import sys

USAGE = ("usage: python -m argtca.attributes generate"
        " (--classes FILE | --dataset NAME [--root DATA])"
         " --out FILE.json [--model M] [--base-url URL] [--num M] ...  (generate --help for all)")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "generate":
        print(f"error: unknown command {argv[0]!r}; {USAGE}", file=sys.stderr)
        return 2
    from .generate import main as generate_main
    return generate_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
