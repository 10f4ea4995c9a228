"""``python -m ilargi``: the main job (see :mod:`ilargi.cli`)."""

import sys

from ilargi.cli import main

sys.exit(main())
