"""python -m fleetfix"""

from fleetfix.cli import main

main()
