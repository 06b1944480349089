"""``python -m cl_validate`` — same as the ``cl-validate`` console script."""

import sys

from cl_validate.cli import main

sys.exit(main())
