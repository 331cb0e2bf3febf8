"""`python -m sim`: the sim bridge (see sim.cli)."""
import sys

from sim.cli import main

sys.exit(main())
