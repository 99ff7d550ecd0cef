"""python -m accelstudy"""

from accelstudy.cli import main

raise SystemExit(main())
