"""`python -m tensorsafe.dcp info|ls|verify|consolidate`."""

import sys

from ._tool import main

sys.exit(main())
