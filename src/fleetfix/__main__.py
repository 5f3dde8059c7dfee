"""python -m fleetfix"""

from fleetfix.interrupt import exit_on_ctrl_c

exit_on_ctrl_c()  # first: a Ctrl-C while the rest is imported exits 99, no traceback

from fleetfix.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
