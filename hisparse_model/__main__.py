"""``python -m hisparse_model {predict,simulate,check,explain,live,app}`` (see
:mod:`hisparse_model.cli`; interrupts and closed streams: :mod:`hisparse_model.exits`)."""

import sys

from .exits import run

sys.exit(run("python -m hisparse_model", "hisparse_model.cli"))
