"""`python -m webhook`: the same as the `gpushare` command."""

import sys

from webhook.cli.main import main

sys.exit(main())
