"""``hisparse {predict,simulate,check,explain,live,app}``, the console script, and
``python -m hisparse_model ...``, the same command (see :mod:`hisparse_model.cli`;
interrupts and closed streams: :mod:`hisparse_model.exits`)."""

import sys

from .exits import run

PROG = "hisparse"  # [project.scripts] in pyproject.toml


def main() -> None:
    """The ``hisparse`` console script's entry point."""
    sys.exit(run(PROG, "hisparse_model.cli"))


if __name__ == "__main__":
    main()
