"""``python -m oncelog``: the command line (cli.py).

For ``broker``, Hypothesis is made unimportable first. kio registers a Hypothesis strategy for
each of its primitive types when it finds Hypothesis installed (as it is wherever tests run),
which costs a broker process a large share of its start-up (measured in
docs/TESTING-WITH-ONCELOG.md) and buys it nothing: a broker never draws examples.
"""

import sys


def main() -> None:
    if sys.argv[1:2] == ["broker"] and "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` -> ImportError
    from oncelog.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
