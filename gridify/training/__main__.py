"""``python -m gridify.training``: the training command line (:func:`gridify.training.cli.main`)."""

from .cli import main

if __name__ == "__main__":
    main()
