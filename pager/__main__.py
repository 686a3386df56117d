import sys

from pager.cli import main

sys.exit(main())
