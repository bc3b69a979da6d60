"""``python -m refold …`` runs the ``refold`` command (the same entry point as the script)."""

from refold.cli.main import main

if __name__ == "__main__":
    main()
