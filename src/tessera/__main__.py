"""``python -m tessera ...``: the ``tessera`` command, for a checkout whose console script is not
on ``PATH`` (the same as ``python -m tessera.cli``)."""

from tessera.cli import main

if __name__ == "__main__":
    main()
