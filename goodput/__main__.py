import sys

from goodput.cli import main

sys.exit(main())
