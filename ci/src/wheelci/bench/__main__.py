"""`python -m wheelci.bench` (and `python -m ci.bench` in this repository)."""

import sys

from wheelci.bench import main

sys.exit(main())
