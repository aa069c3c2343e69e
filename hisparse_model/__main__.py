"""``python -m hisparse_model {predict,live}`` (see :mod:`hisparse_model.cli`)."""

import sys

from .cli import main

sys.exit(main())
