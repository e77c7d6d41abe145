"""``python -m oncelog``: the command line (cli.py).

For ``broker``, two things keep a broker's start-up short (issue 19; measured in
docs/TESTING-WITH-ONCELOG.md):

- Hypothesis is made unimportable first. kio registers a Hypothesis strategy for each of its
  primitive types when it finds Hypothesis installed (as it is wherever tests run), which costs
  a broker process a large share of its start-up and buys it nothing: a broker never draws
  examples.
- A plain, valid ``broker`` command line is parsed by ``cli_broker.fast_parse`` and run without
  importing the rest of the CLI, Typer or pydantic (Typer's coercion). Anything else — ``--help``,
  a usage error — goes to the Typer command as before, built from the same option definitions.
"""

import sys


def main() -> None:
    if sys.argv[1:2] == ["broker"]:
        if "hypothesis" not in sys.modules:
            sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` -> ImportError
        from oncelog.cli_broker import fast_parse, run_broker

        kwargs = fast_parse(sys.argv[2:])
        if kwargs is not None:
            run_broker(**kwargs)
            return
    from oncelog.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
