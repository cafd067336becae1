import sys

from bertkit.cli.main import main

sys.exit(main())
