"""python -m accelstudy"""

import sys

from accelstudy.cli import main

sys.exit(main())
